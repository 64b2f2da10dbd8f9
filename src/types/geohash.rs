//! Redis 7.0's geohash arithmetic (geohash.c, geohash_helper.c, and the
//! ordering parts of geo.c), so that every stored score, decoded position,
//! distance and search result equals Redis's to the bit.
//!
//! # Encoding
//! A position is two 26-bit cell numbers, longitude over -180..180 and
//! latitude over -85.05112878..85.05112878 (the Web Mercator limits), the
//! latitude bits in the even positions and the longitude bits in the odd
//! ones: a 52-bit integer that a sorted set keeps as its score. A cell
//! number is `offset * 2^step` truncated, so the upper limit itself gives
//! 2^26, a 27th bit that lands above bit 51, exactly as in Redis (a point at
//! longitude 180 stores score 2^53). Decoding takes the middle of the cell
//! and clamps it to the limits; the score is first converted to an unsigned
//! 64-bit integer as x86-64 C does (`score_bits`), so scores that no GEOADD
//! wrote decode as Redis decodes them.
//!
//! # Searches
//! [`Shape`] is a circle or an axis-aligned box around a centre;
//! [`search_cells`] picks the step from the radius, the cell holding the
//! centre and its eight neighbours, drops the neighbours the bounding box
//! does not reach, in Redis's scan order (centre, N, S, E, W, NE, NW, SE,
//! SW); [`cell_scores`] gives the score range of a cell; [`Shape::contains`]
//! is the exact test with the distance (haversine on a sphere of radius
//! 6372797.560856 m, the f64 operations in Redis's order).
//! [`partial_sort`] is the partial quicksort Redis orders a COUNT-limited
//! result with (not stable: equal distances come out in its order).
//!
//! Knows nothing of commands, connections, replies or the keyspace: it
//! must not reach them. Inputs are validated numbers; the caller parses.

use std::cmp::Ordering;

/// Bits per coordinate of a stored score (26 * 2 = 52).
pub const STEP_MAX: u8 = 26;
pub const LONG_MIN: f64 = -180.0;
pub const LONG_MAX: f64 = 180.0;
pub const LAT_MIN: f64 = -85.05112878;
pub const LAT_MAX: f64 = 85.05112878;
/// The sphere distances are computed on (Redis's EARTH_RADIUS_IN_METERS).
pub const EARTH_RADIUS_M: f64 = 6372797.560856;
const MERCATOR_MAX: f64 = 20037726.37;
/// Degrees to radians, folded at compile time as C folds `M_PI / 180.0`.
const D_R: f64 = std::f64::consts::PI / 180.0;

fn deg_rad(ang: f64) -> f64 {
    ang * D_R
}

fn rad_deg(ang: f64) -> f64 {
    ang / D_R
}

/// A cell: `step` bits per coordinate, interleaved in `bits`. The zero
/// value (no bits, step 0) marks a neighbour left out of a search.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Cell {
    pub bits: u64,
    pub step: u8,
}

impl Cell {
    pub fn is_zero(&self) -> bool {
        self.bits == 0 && self.step == 0
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
struct Range {
    min: f64,
    max: f64,
}

/// A cell's extent in degrees.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Area {
    lon: Range,
    lat: Range,
}

const WGS84_LON: Range = Range {
    min: LONG_MIN,
    max: LONG_MAX,
};
const WGS84_LAT: Range = Range {
    min: LAT_MIN,
    max: LAT_MAX,
};
/// GEOHASH's ranges: the standard geohash latitude range.
const STD_LAT: Range = Range {
    min: -90.0,
    max: 90.0,
};

/// The 32 bits of `v` moved to the even bit positions of a u64.
fn spread(v: u32) -> u64 {
    let mut x = v as u64;
    x = (x | (x << 16)) & 0x0000_FFFF_0000_FFFF;
    x = (x | (x << 8)) & 0x00FF_00FF_00FF_00FF;
    x = (x | (x << 4)) & 0x0F0F_0F0F_0F0F_0F0F;
    x = (x | (x << 2)) & 0x3333_3333_3333_3333;
    (x | (x << 1)) & 0x5555_5555_5555_5555
}

/// The even bit positions of `x` gathered into 32 bits (undoes `spread`).
fn squash(x: u64) -> u32 {
    let mut x = x & 0x5555_5555_5555_5555;
    x = (x | (x >> 1)) & 0x3333_3333_3333_3333;
    x = (x | (x >> 2)) & 0x0F0F_0F0F_0F0F_0F0F;
    x = (x | (x >> 4)) & 0x00FF_00FF_00FF_00FF;
    x = (x | (x >> 8)) & 0x0000_FFFF_0000_FFFF;
    ((x | (x >> 16)) & 0x0000_0000_FFFF_FFFF) as u32
}

/// C's `(uint32_t)` of a non-negative double (truncation; what does not
/// fit wraps as the x86-64 conversion through 64 bits does).
fn to_u32(v: f64) -> u32 {
    v as i64 as u32
}

/// geohashEncode: None outside the WGS84 limits or `ranges`.
fn encode(lon_r: Range, lat_r: Range, lon: f64, lat: f64, step: u8) -> Option<Cell> {
    if step == 0 || step > 32 {
        return None;
    }
    if !(LONG_MIN..=LONG_MAX).contains(&lon) || !(LAT_MIN..=LAT_MAX).contains(&lat) {
        return None;
    }
    if lat < lat_r.min || lat > lat_r.max || lon < lon_r.min || lon > lon_r.max {
        return None;
    }
    let mut lat_off = (lat - lat_r.min) / (lat_r.max - lat_r.min);
    let mut lon_off = (lon - lon_r.min) / (lon_r.max - lon_r.min);
    let scale = (1u64 << step) as f64;
    lat_off *= scale;
    lon_off *= scale;
    Some(Cell {
        bits: spread(to_u32(lat_off)) | (spread(to_u32(lon_off)) << 1),
        step,
    })
}

/// geohashDecode: the cell's extent; None for the zero cell.
fn decode(lon_r: Range, lat_r: Range, c: Cell) -> Option<Area> {
    if c.is_zero() {
        return None;
    }
    let ilat = squash(c.bits);
    let ilon = squash(c.bits >> 1);
    let div = (1u64 << c.step) as f64;
    let lat_scale = lat_r.max - lat_r.min;
    let lon_scale = lon_r.max - lon_r.min;
    // C adds one in 32 bits, then converts.
    let frac = |i: u32| i as f64 * 1.0 / div;
    Some(Area {
        lat: Range {
            min: lat_r.min + frac(ilat) * lat_scale,
            max: lat_r.min + frac(ilat.wrapping_add(1)) * lat_scale,
        },
        lon: Range {
            min: lon_r.min + frac(ilon) * lon_scale,
            max: lon_r.min + frac(ilon.wrapping_add(1)) * lon_scale,
        },
    })
}

/// The centre of a cell, clamped to the WGS84 limits.
fn center(a: &Area) -> (f64, f64) {
    let lon = ((a.lon.min + a.lon.max) / 2.0).clamp(LONG_MIN, LONG_MAX);
    let lat = ((a.lat.min + a.lat.max) / 2.0).clamp(LAT_MIN, LAT_MAX);
    (lon, lat)
}

/// A cell's bits moved to 52 bits (the score of its first point).
pub fn align52(c: Cell) -> u64 {
    c.bits << (52 - 2 * c.step as u32)
}

/// The score GEOADD stores for a valid position (None outside the limits).
pub fn score_of(lon: f64, lat: f64) -> Option<u64> {
    encode(WGS84_LON, WGS84_LAT, lon, lat, STEP_MAX).map(align52)
}

/// Whether a position is inside the limits GEOADD accepts.
pub fn valid_position(lon: f64, lat: f64) -> bool {
    (LONG_MIN..=LONG_MAX).contains(&lon) && (LAT_MIN..=LAT_MAX).contains(&lat)
}

/// C's `(uint64_t)` of a double as gcc compiles it for x86-64: below 2^63
/// a signed truncation (out of range: 2^63), above it the same on the
/// value less 2^63 with the top bit flipped.
pub fn score_bits(score: f64) -> u64 {
    const TWO63: f64 = 9_223_372_036_854_775_808.0;
    let cvt = |v: f64| -> u64 {
        if (-TWO63..TWO63).contains(&v) {
            v as i64 as u64
        } else {
            1u64 << 63
        }
    };
    if score < TWO63 {
        cvt(score)
    } else {
        cvt(score - TWO63) ^ (1u64 << 63)
    }
}

/// The position a score stands for (Redis's decodeGeohash): (lon, lat).
pub fn decode_score(score: f64) -> (f64, f64) {
    let c = Cell {
        bits: score_bits(score),
        step: STEP_MAX,
    };
    let area = decode(WGS84_LON, WGS84_LAT, c).expect("step 26 is never the zero cell");
    center(&area)
}

const BASE32: &[u8; 32] = b"0123456789bcdefghjkmnpqrstuvwxyz";

/// GEOHASH's 11 characters for a decoded position: re-encoded over the
/// standard -90..90 latitude range; the 11th character stands for bits a
/// 52-bit hash does not have, always '0'.
pub fn geohash_string(lon: f64, lat: f64) -> [u8; 11] {
    let bits = encode(WGS84_LON, STD_LAT, lon, lat, STEP_MAX).map_or(0, |c| c.bits);
    let mut out = [b'0'; 11];
    for (i, ch) in out.iter_mut().enumerate().take(10) {
        let idx = (bits >> (52 - (i + 1) * 5)) & 0x1f;
        *ch = BASE32[idx as usize];
    }
    out
}

/// The great-circle distance in meters (haversine), as Redis 7.0.15's
/// geohashGetDistance computes it: on one meridian (the half longitude
/// difference's sine exactly 0) the arc along it, else the haversine.
pub fn distance(lon1: f64, lat1: f64, lon2: f64, lat2: f64) -> f64 {
    let lon1r = deg_rad(lon1);
    let lon2r = deg_rad(lon2);
    let v = ((lon2r - lon1r) / 2.0).sin();
    if v == 0.0 {
        return EARTH_RADIUS_M * (deg_rad(lat2) - deg_rad(lat1)).abs();
    }
    let lat1r = deg_rad(lat1);
    let lat2r = deg_rad(lat2);
    let u = ((lat2r - lat1r) / 2.0).sin();
    2.0 * EARTH_RADIUS_M * (u * u + lat1r.cos() * lat2r.cos() * v * v).sqrt().asin()
}

const LON_BITS: u64 = 0xaaaa_aaaa_aaaa_aaaa;
const LAT_BITS: u64 = 0x5555_5555_5555_5555;

/// One cell along the coordinate whose bits `mine` selects (LON_BITS: east
/// for `d > 0`, west below; LAT_BITS: north, south), wrapping around: the
/// other coordinate's bits are filled with ones so the carry (or borrow)
/// runs through them.
fn move_on(c: &mut Cell, mine: u64, d: i8) {
    if d == 0 {
        return;
    }
    let shift = 64 - 2 * c.step as u32;
    let mut v = c.bits & mine;
    let other = c.bits & !mine;
    let zz = !mine >> shift;
    if d > 0 {
        v = v.wrapping_add(zz + 1);
    } else {
        v |= zz;
        v = v.wrapping_sub(zz + 1);
    }
    v &= mine >> shift;
    c.bits = v | other;
}

/// Neighbour directions in Redis's scan order after the centre.
const DIRS: [(i8, i8); 8] = [
    (0, 1),   // north
    (0, -1),  // south
    (1, 0),   // east
    (-1, 0),  // west
    (1, 1),   // north-east
    (-1, 1),  // north-west
    (1, -1),  // south-east
    (-1, -1), // south-west
];

/// The centre cell and its eight neighbours, in scan order.
pub fn neighbors(c: Cell) -> [Cell; 9] {
    let mut out = [c; 9];
    for (n, &(dx, dy)) in out[1..].iter_mut().zip(DIRS.iter()) {
        move_on(n, LON_BITS, dx);
        move_on(n, LAT_BITS, dy);
    }
    out
}

/// geohashEstimateStepsByRadius: the cell size that roughly fits a radius.
fn estimate_steps(range_m: f64, lat: f64) -> u8 {
    if range_m == 0.0 {
        return 26;
    }
    let mut range = range_m;
    let mut step: i32 = 1;
    while range < MERCATOR_MAX {
        range *= 2.0;
        step += 1;
    }
    step -= 2;
    if !(-66.0..=66.0).contains(&lat) {
        step -= 1;
        if !(-80.0..=80.0).contains(&lat) {
            step -= 1;
        }
    }
    step.clamp(1, 26) as u8
}

/// How far a search reaches from its centre: a radius, or the width and
/// height of an axis-aligned box, in the request's unit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Extent {
    Radius(f64),
    Box { width: f64, height: f64 },
}

/// A search area: its centre, its extent, and the size of the extent's
/// unit in meters (`to_m`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Shape {
    pub lon: f64,
    pub lat: f64,
    pub extent: Extent,
    pub to_m: f64,
}

impl Shape {
    /// (min_lon, min_lat, max_lon, max_lat) of the searched area
    /// (geohashBoundingBox): the wider edge of the trapezoid, the one
    /// nearer the equator, bounds the longitudes.
    fn bounding_box(&self) -> (f64, f64, f64, f64) {
        let (w, h) = match self.extent {
            Extent::Radius(r) => (self.to_m * r, self.to_m * r),
            Extent::Box { width, height } => {
                (self.to_m * (width / 2.0), self.to_m * (height / 2.0))
            }
        };
        let lat_delta = rad_deg(h / EARTH_RADIUS_M);
        let top = rad_deg(w / EARTH_RADIUS_M / deg_rad(self.lat + lat_delta).cos());
        let bottom = rad_deg(w / EARTH_RADIUS_M / deg_rad(self.lat - lat_delta).cos());
        let lon_delta = if self.lat < 0.0 { bottom } else { top };
        (
            self.lon - lon_delta,
            self.lat - lat_delta,
            self.lon + lon_delta,
            self.lat + lat_delta,
        )
    }

    /// The distance in meters from the centre when the position is inside
    /// the shape (geoWithinShape), else None.
    pub fn contains(&self, lon: f64, lat: f64) -> Option<f64> {
        match self.extent {
            Extent::Radius(r) => {
                let d = distance(self.lon, self.lat, lon, lat);
                (d <= r * self.to_m).then_some(d)
            }
            Extent::Box { width, height } => {
                let (w, h) = (width * self.to_m, height * self.to_m);
                let lon_d = distance(lon, lat, self.lon, lat);
                let lat_d = distance(lon, lat, lon, self.lat);
                if lon_d > w / 2.0 || lat_d > h / 2.0 {
                    return None;
                }
                Some(distance(self.lon, self.lat, lon, lat))
            }
        }
    }
}

/// The cells to scan for `shape`, in Redis's order (centre, N, S, E, W,
/// NE, NW, SE, SW); cells the search cannot reach are zero
/// (geohashCalculateAreasByShapeWGS84).
pub fn search_cells(shape: &Shape) -> [Cell; 9] {
    let (min_lon, min_lat, max_lon, max_lat) = shape.bounding_box();
    let (lon, lat) = (shape.lon, shape.lat);
    let mut radius_m = match shape.extent {
        Extent::Radius(r) => r,
        Extent::Box { width, height } => {
            ((width / 2.0) * (width / 2.0) + (height / 2.0) * (height / 2.0)).sqrt()
        }
    };
    radius_m *= shape.to_m;
    let mut steps = estimate_steps(radius_m, lat);
    let at = |steps: u8| {
        let c = encode(WGS84_LON, WGS84_LAT, lon, lat, steps).unwrap_or_default();
        let cells = neighbors(c);
        let area = decode(WGS84_LON, WGS84_LAT, c);
        (cells, area)
    };
    let (mut cells, mut area) = at(steps);
    // Neighbours too small to reach the box's edges: one step bigger.
    let edge = |i: usize| decode(WGS84_LON, WGS84_LAT, cells[i]);
    let short = edge(1).is_some_and(|n| n.lat.max < max_lat)
        || edge(2).is_some_and(|s| s.lat.min > min_lat)
        || edge(3).is_some_and(|e| e.lon.max < max_lon)
        || edge(4).is_some_and(|w| w.lon.min > min_lon);
    if steps > 1 && short {
        steps -= 1;
        (cells, area) = at(steps);
    }
    if let (true, Some(a)) = (steps >= 2, area) {
        let zero = |cells: &mut [Cell; 9], idx: [usize; 3]| {
            for i in idx {
                cells[i] = Cell::default();
            }
        };
        if a.lat.min < min_lat {
            zero(&mut cells, [2, 8, 7]);
        }
        if a.lat.max > max_lat {
            zero(&mut cells, [1, 5, 6]);
        }
        if a.lon.min < min_lon {
            zero(&mut cells, [4, 8, 6]);
        }
        if a.lon.max > max_lon {
            zero(&mut cells, [3, 7, 5]);
        }
    }
    cells
}

/// The scores of a cell's points: `min <= score < max`.
pub fn cell_scores(c: Cell) -> (u64, u64) {
    let min = align52(c);
    let max = align52(Cell {
        bits: c.bits.wrapping_add(1),
        step: c.step,
    });
    (min, max)
}

/// Redis's pqsort (NetBSD's quicksort, recursing only into the parts that
/// overlap positions `lo..=hi`; no switch to insertion sort after a
/// partition that swapped nothing): after it, those positions hold what a
/// full sort would put there; equal elements end where it leaves them.
pub fn partial_sort<T>(v: &mut [T], cmp: &impl Fn(&T, &T) -> Ordering, lo: usize, hi: usize) {
    pqsort(v, 0, v.len(), cmp, lo, hi);
}

fn insertion<T>(v: &mut [T], a: usize, n: usize, cmp: &impl Fn(&T, &T) -> Ordering) {
    for pm in a + 1..a + n {
        let mut pl = pm;
        while pl > a && cmp(&v[pl - 1], &v[pl]) == Ordering::Greater {
            v.swap(pl, pl - 1);
            pl -= 1;
        }
    }
}

fn med3<T>(v: &[T], a: usize, b: usize, c: usize, cmp: &impl Fn(&T, &T) -> Ordering) -> usize {
    use Ordering::{Greater, Less};
    if cmp(&v[a], &v[b]) == Less {
        if cmp(&v[b], &v[c]) == Less {
            b
        } else if cmp(&v[a], &v[c]) == Less {
            c
        } else {
            a
        }
    } else if cmp(&v[b], &v[c]) == Greater {
        b
    } else if cmp(&v[a], &v[c]) == Less {
        a
    } else {
        c
    }
}

fn vecswap<T>(v: &mut [T], a: usize, b: usize, n: usize) {
    for i in 0..n {
        v.swap(a + i, b + i);
    }
}

/// Whether the part `s..s+m` lies wholly before or after `lo..=hi`.
fn outside(s: usize, m: usize, lo: usize, hi: usize) -> bool {
    (lo < s && hi < s) || (lo >= s + m && hi >= s + m)
}

fn pqsort<T>(
    v: &mut [T],
    mut a: usize,
    mut n: usize,
    cmp: &impl Fn(&T, &T) -> Ordering,
    lo: usize,
    hi: usize,
) {
    use Ordering::{Equal, Greater, Less};
    loop {
        if n < 7 {
            return insertion(v, a, n, cmp);
        }
        let mut pm = a + n / 2;
        if n > 7 {
            let mut pl = a;
            let mut pn = a + n - 1;
            if n > 40 {
                let d = n / 8;
                pl = med3(v, pl, pl + d, pl + 2 * d, cmp);
                pm = med3(v, pm - d, pm, pm + d, cmp);
                pn = med3(v, pn - 2 * d, pn - d, pn, cmp);
            }
            pm = med3(v, pl, pm, pn, cmp);
        }
        v.swap(a, pm);
        let (mut pa, mut pb) = (a + 1, a + 1);
        let (mut pc, mut pd) = (a + n - 1, a + n - 1);
        loop {
            while pb <= pc {
                let r = cmp(&v[pb], &v[a]);
                if r == Greater {
                    break;
                }
                if r == Equal {
                    v.swap(pa, pb);
                    pa += 1;
                }
                pb += 1;
            }
            while pb <= pc {
                let r = cmp(&v[pc], &v[a]);
                if r == Less {
                    break;
                }
                if r == Equal {
                    v.swap(pc, pd);
                    pd -= 1;
                }
                pc -= 1;
            }
            if pb > pc {
                break;
            }
            v.swap(pb, pc);
            pb += 1;
            pc -= 1;
        }
        let pn = a + n;
        let r = (pa - a).min(pb - pa);
        vecswap(v, a, pb - r, r);
        let r = (pd - pc).min(pn - pd - 1);
        vecswap(v, pb, pn - r, r);
        let left = pb - pa;
        if left > 1 && !outside(a, left, lo, hi) {
            pqsort(v, a, left, cmp, lo, hi);
        }
        let right = pd - pc;
        if right > 1 {
            a = pn - right;
            n = right;
            if !outside(a, n, lo, hi) {
                continue;
            }
        }
        return;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Scores, positions and hashes printed by Redis 7.0.15.
    #[test]
    fn known_scores_and_positions() {
        assert_eq!(score_of(13.361389, 38.115556), Some(3479099956230698));
        assert_eq!(score_of(15.087269, 37.502669), Some(3479447370796909));
        assert_eq!(score_of(-180.0, -85.05112878), Some(0));
        // The upper limits carry into bits 52 and 53.
        assert_eq!(score_of(180.0, 85.05112878), Some(13510798882111488));
        assert_eq!(score_of(180.0000001, 0.0), None);
        assert_eq!(score_of(0.0, 85.06), None);
        let (lon, lat) = decode_score(3479099956230698.0);
        assert_eq!(
            format!("{lon:.17} {lat:.17}"),
            "13.36138933897018433 38.11555639549629859"
        );
        let (lon, lat) = decode_score(13510798882111488.0);
        assert_eq!((lon, lat), (180.0, LAT_MAX));
        let (lon, lat) = decode_score(0.0);
        assert_eq!(
            format!("{lon:.17} {lat:.17}"),
            "-179.99999731779098511 -85.05112751263942528"
        );
        let (lon, lat) = decode_score(3479099956230698.0);
        assert_eq!(&geohash_string(lon, lat), b"sqc8b49rny0");
        let (lon, lat) = decode_score(3479447370796909.0);
        assert_eq!(&geohash_string(lon, lat), b"sqdtr74hyu0");
        assert_eq!(&geohash_string(180.0, LAT_MAX), b"bp05b5048p0");
        let (lon, lat) = decode_score(0.0);
        assert_eq!(&geohash_string(lon, lat), b"00bh0hbj200");
    }

    #[test]
    fn encode_decode_round_trip() {
        for &(lon, lat) in &[
            (0.0, 0.0),
            (-122.27652, 37.805186),
            (179.999, -85.0),
            (-179.999, 85.0),
            (2.35, 48.85),
        ] {
            let s = score_of(lon, lat).unwrap();
            assert!(s < 1 << 52);
            let (dlon, dlat) = decode_score(s as f64);
            // A 26-bit cell is about 5.4e-6 degrees of longitude wide.
            assert!((dlon - lon).abs() < 6e-6, "{lon} {dlon}");
            assert!((dlat - lat).abs() < 3e-6, "{lat} {dlat}");
            assert_eq!(score_of(dlon, dlat), Some(s));
        }
    }

    #[test]
    fn bits_spread_and_squash() {
        for v in [0u32, 1, 0x3ff_ffff, 0x400_0000, 0xffff_ffff, 0x1234_5678] {
            assert_eq!(squash(spread(v)), v);
            assert_eq!(spread(v) & 0xaaaa_aaaa_aaaa_aaaa, 0);
        }
    }

    #[test]
    fn casts_like_x86_64_c() {
        assert_eq!(score_bits(1.9), 1);
        assert_eq!(score_bits(-1.0), u64::MAX);
        assert_eq!(score_bits(1e19), 10_000_000_000_000_000_000);
        assert_eq!(score_bits(f64::INFINITY), 0);
        assert_eq!(score_bits(f64::NEG_INFINITY), 1 << 63);
        assert_eq!(score_bits(1e30), 0);
    }

    #[test]
    fn neighbours_step_one_cell() {
        let c = encode(WGS84_LON, WGS84_LAT, 10.0, 10.0, 10).unwrap();
        let n = neighbors(c);
        let area = |c: Cell| decode(WGS84_LON, WGS84_LAT, c).unwrap();
        let a = area(n[0]);
        assert_eq!(area(n[1]).lat.min, a.lat.max); // north
        assert_eq!(area(n[2]).lat.max, a.lat.min); // south
        assert_eq!(area(n[3]).lon.min, a.lon.max); // east
        assert_eq!(area(n[4]).lon.max, a.lon.min); // west
        assert_eq!(area(n[5]).lon.min, a.lon.max); // north-east
        assert_eq!(area(n[5]).lat.min, a.lat.max);
        assert_eq!(area(n[8]).lon.max, a.lon.min); // south-west
        assert_eq!(area(n[8]).lat.max, a.lat.min);
        // East of the last column wraps to the first.
        let edge = encode(WGS84_LON, WGS84_LAT, 179.99, 0.0, 4).unwrap();
        assert_eq!(area(neighbors(edge)[3]).lon.min, -180.0);
    }

    #[test]
    fn distances() {
        // GEODIST Palermo Catania in Redis 7.0.15: 166274.1516 m.
        let (a, b) = (
            decode_score(3479099956230698.0),
            decode_score(3479447370796909.0),
        );
        assert_eq!(
            format!("{:.4}", distance(a.0, a.1, b.0, b.1)),
            "166274.1516"
        );
        assert_eq!(distance(1.0, 2.0, 1.0, 2.0), 0.0);
        // One meridian: the arc, not the haversine (which differs in the
        // last digit); Redis 7.0.15 stores 5288106.5093889758 here.
        let (_, lat) = decode_score(score_of(180.0, 37.417404).unwrap() as f64);
        let d = distance(180.0, 84.961073, 180.0, lat);
        assert_eq!(format!("{d:.10}"), "5288106.5093889758");
        let d = distance(179.99999999999998, 84.961073, 180.0, lat);
        assert_eq!(format!("{:.13}", d / 1000.0), "5288.1065093889765");
        let half = std::f64::consts::PI * EARTH_RADIUS_M;
        assert!((distance(0.0, 0.0, 180.0, 0.0) - half).abs() < 1e-6);
    }

    #[test]
    fn steps_by_radius() {
        assert_eq!(estimate_steps(0.0, 0.0), 26);
        assert_eq!(estimate_steps(1.0, 0.0), 24);
        assert_eq!(estimate_steps(200_000.0, 0.0), 6);
        assert_eq!(estimate_steps(200_000.0, 70.0), 5);
        assert_eq!(estimate_steps(200_000.0, -81.0), 4);
        assert_eq!(estimate_steps(1e9, 0.0), 1);
    }

    #[test]
    fn search_cells_cover_a_small_circle() {
        let shape = Shape {
            lon: 15.0,
            lat: 37.0,
            extent: Extent::Radius(200.0),
            to_m: 1000.0,
        };
        let cells = search_cells(&shape);
        assert!(!cells[0].is_zero());
        let (min, max) = cell_scores(cells[0]);
        assert!(min < max);
        // Catania is within 200 km, at 56.4413 km.
        let (lon, lat) = decode_score(3479447370796909.0);
        let d = shape.contains(lon, lat).unwrap();
        assert_eq!(format!("{:.4}", d / 1000.0), "56.4413");
        let found = cells.iter().filter(|c| !c.is_zero()).any(|&c| {
            let (lo, hi) = cell_scores(c);
            (lo..hi).contains(&3479447370796909)
        });
        assert!(found);
    }

    #[test]
    fn box_contains() {
        let shape = Shape {
            lon: 0.0,
            lat: 0.0,
            extent: Extent::Box {
                width: 200.0,
                height: 100.0,
            },
            to_m: 1000.0,
        };
        assert!(shape.contains(0.8, 0.0).is_some());
        assert!(shape.contains(0.0, 0.8).is_none());
        assert!(shape.contains(0.0, 0.4).is_some());
        assert!(shape.contains(1.0, 0.0).is_none());
    }

    /// The partial sort puts the right values at the requested positions,
    /// and equal values in the unstable order Redis 7.0.15 returns
    /// (GEORADIUS ... COUNT 20 DESC over twenty equal points and one
    /// farther one: z0 b c d e f g h i j a l m n o p q r s t).
    #[test]
    fn partial_sort_matches_redis() {
        let mut v: Vec<(f64, char)> = "abcdefghijklmnopqrst".chars().map(|c| (0.0, c)).collect();
        v.push((1.0, 'Z'));
        let desc = |a: &(f64, char), b: &(f64, char)| b.0.partial_cmp(&a.0).unwrap();
        partial_sort(&mut v, &desc, 0, 19);
        let got: String = v[..20].iter().map(|p| p.1).collect();
        assert_eq!(got, "Zbcdefghijalmnopqrst");
        // Two equal points among others (GEORADIUS ... COUNT 5 in Redis
        // 7.0.15 returns m6 m4 m2 m0 m12 from this scan order).
        let mut v: Vec<(f64, &str)> = vec![
            (4449.26, "m5"),
            (4429.50, "m8"),
            (165.077, "m2"),
            (165.079, "m0"),
            (165.338, "m12"),
            (0.648, "m4"),
            (0.648, "m6"),
            (15569.9, "m9"),
            (12170.4, "m1"),
            (13805.7, "m3"),
            (14455.1, "m13"),
            (10669.2, "m18"),
            (10597.6, "m19"),
            (4440.28, "m7"),
            (6390.41, "m11"),
            (14814.2, "m17"),
            (18428.2, "m14"),
            (10958.4, "m15"),
        ];
        let asc = |a: &(f64, &str), b: &(f64, &str)| a.0.partial_cmp(&b.0).unwrap();
        partial_sort(&mut v, &asc, 0, 4);
        let got: Vec<&str> = v[..5].iter().map(|p| p.1).collect();
        assert_eq!(got, ["m6", "m4", "m2", "m0", "m12"]);
        let mut w: Vec<u32> = (0..100).map(|i| (i * 37) % 101).collect();
        partial_sort(&mut w, &|a: &u32, b: &u32| a.cmp(b), 0, 9);
        assert_eq!(&w[..10], &[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    }
}
