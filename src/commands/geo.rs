//! Geo commands (Redis 7.0's geo.c): GEOADD, GEODIST, GEOHASH, GEOPOS,
//! GEORADIUS, GEORADIUSBYMEMBER and their `_RO` forms, GEOSEARCH and
//! GEOSEARCHSTORE.
//!
//! A geo index is an ordinary sorted set whose scores are 52-bit geohashes
//! (`types::geohash` does the arithmetic). GEOADD is Redis's rewrite of
//! itself into ZADD: it runs zset's ZADD on the computed scores (so events,
//! `dirty` and WRONGTYPE are ZADD's) and is logged as that ZADD, as Redis
//! propagates it. The searches read through the typed lookups; their STORE
//! forms write the result with zset's `store_result` (`Db::replace`:
//! "georadiusstore"/"geosearchstore", or `del` for an empty result).
//!
//! Replies are Redis's bytes: distances with four decimals (`%.4f`),
//! coordinates in Redis's human long double form (`longdouble::human`),
//! hashes as integers, and results in the order of Redis's cell scan,
//! sorted as Redis sorts them (a stable sort, or its partial quicksort
//! with COUNT). Options and units are compared as C strings.
//!
//! Reaches the keyspace only through `Ctx`; must not notify anyone itself.

use bytes::Bytes;

use super::longdouble::human;
use super::zset::{store_result, zadd_generic};
use super::*;
use crate::db::ValueRef;
use crate::types::geohash::{
    cell_scores, decode_score, distance, geohash_string, partial_sort, score_of, search_cells,
    valid_position, Extent, Shape,
};
use crate::types::zset::ScoreRange;
use crate::types::{Kind, ZSet};
use crate::util::{c_str, c_str_eq};

const READ_SLOW: &[&str] = &["read", "geo", "slow"];
const WRITE_SLOW: &[&str] = &["write", "geo", "slow"];
const WD: u32 = WRITE | DENYOOM;
const ONE: (i32, i32, i32) = (1, 1, 1);
const G: &str = "geo";

#[rustfmt::skip]
pub static COMMANDS: &[Spec] = &[
    spec("geoadd", -5, WD, ONE, G, "3.2.0", "Add one or more geospatial items in the geospatial index represented using a sorted set", WRITE_SLOW, geoadd),
    spec("geodist", -4, READONLY, ONE, G, "3.2.0", "Returns the distance between two members of a geospatial index", READ_SLOW, geodist),
    spec("geohash", -2, READONLY, ONE, G, "3.2.0", "Returns members of a geospatial index as standard geohash strings", READ_SLOW, geohash),
    spec("geopos", -2, READONLY, ONE, G, "3.2.0", "Returns longitude and latitude of members of a geospatial index", READ_SLOW, geopos),
    spec("georadius", -6, WD, ONE, G, "3.2.0", "Query a sorted set representing a geospatial index to fetch members matching a given maximum distance from a point", WRITE_SLOW, georadius).pushes(Pushes::First),
    spec("georadius_ro", -6, READONLY, ONE, G, "3.2.10", "A read-only variant for GEORADIUS", READ_SLOW, georadius_ro),
    spec("georadiusbymember", -5, WD, ONE, G, "3.2.0", "Query a sorted set representing a geospatial index to fetch members matching a given maximum distance from a member", WRITE_SLOW, georadiusbymember).pushes(Pushes::First),
    spec("georadiusbymember_ro", -5, READONLY, ONE, G, "3.2.10", "A read-only variant for GEORADIUSBYMEMBER", READ_SLOW, georadiusbymember_ro),
    spec("geosearch", -7, READONLY, ONE, G, "6.2.0", "Query a sorted set representing a geospatial index to fetch members inside an area of a box or a circle.", READ_SLOW, geosearch),
    spec("geosearchstore", -8, WD, (1, 2, 1), G, "6.2.0", "Query a sorted set representing a geospatial index to fetch members inside an area of a box or a circle, and store the result in another key.", WRITE_SLOW, geosearchstore).pushes(Pushes::First),
];

const NOT_MEMBER: &str = "ERR could not decode requested zset member";

// ---------------------------------------------------------------------------
// Arguments

/// A longitude and latitude (extractLongLatOrReply): both numbers first,
/// then the limits; None after replying the error.
fn lon_lat(ctx: &mut Ctx, lon: &[u8], lat: &[u8]) -> Option<(f64, f64)> {
    let mut xy = [0.0; 2];
    for (v, a) in xy.iter_mut().zip([lon, lat]) {
        match parse_float(a) {
            Some(f) => *v = f,
            None => {
                ctx.error(NOT_FLOAT);
                return None;
            }
        }
    }
    if !valid_position(xy[0], xy[1]) {
        ctx.error(&format!(
            "ERR invalid longitude,latitude pair {:.6},{:.6}",
            xy[0], xy[1]
        ));
        return None;
    }
    Some((xy[0], xy[1]))
}

/// A unit's size in meters (extractUnitOrReply); None after the error.
fn unit(ctx: &mut Ctx, a: &[u8]) -> Option<f64> {
    let to_m = if c_str_eq(a, "m") {
        1.0
    } else if c_str_eq(a, "km") {
        1000.0
    } else if c_str_eq(a, "ft") {
        0.3048
    } else if c_str_eq(a, "mi") {
        1609.34
    } else {
        ctx.error("ERR unsupported unit provided. please use M, KM, FT, MI");
        return None;
    };
    Some(to_m)
}

/// A size that must be a non-negative number.
fn size(ctx: &mut Ctx, a: &[u8], what: &str) -> Option<f64> {
    match parse_float(a) {
        Some(v) => Some(v),
        None => {
            ctx.error(&format!("ERR need numeric {what}"));
            None
        }
    }
}

/// `radius unit` (extractDistanceOrReply): (radius, unit in meters).
fn radius_arg(ctx: &mut Ctx, args: &[Bytes]) -> Option<(f64, f64)> {
    let r = size(ctx, &args[0], "radius")?;
    if r < 0.0 {
        ctx.error("ERR radius cannot be negative");
        return None;
    }
    Some((r, unit(ctx, &args[1])?))
}

/// `width height unit` (extractBoxOrReply): (width, height, unit in meters).
fn box_arg(ctx: &mut Ctx, args: &[Bytes]) -> Option<(f64, f64, f64)> {
    let w = size(ctx, &args[0], "width")?;
    let h = size(ctx, &args[1], "height")?;
    if h < 0.0 || w < 0.0 {
        ctx.error("ERR height or width cannot be negative");
        return None;
    }
    Some((w, h, unit(ctx, &args[2])?))
}

/// The sorted set at `key`, already looked up (and type-checked) by the
/// command: re-borrowed without counting a hit.
fn peek_zset<'a>(db: &'a mut crate::db::Db, key: &[u8]) -> Option<&'a ZSet> {
    match db.peek(key)? {
        ValueRef::Obj(v) => ZSet::of(v),
        ValueRef::Str(_) => None,
    }
}

/// The position of `member` of the set at `key` (longLatFromMember).
fn member_pos(ctx: &mut Ctx, key: &[u8], member: &[u8]) -> Option<(f64, f64)> {
    peek_zset(ctx.db(), key)?.score(member).map(decode_score)
}

// ---------------------------------------------------------------------------
// Replies

/// A distance as Redis's addReplyDoubleDistance: four decimals, a bulk
/// string in both protocols.
fn put_distance(out: &mut Out, d: f64) {
    out.bulk(format!("{d:.4}").as_bytes());
}

/// A coordinate as addReplyHumanLongDouble: a bulk string in RESP2, a
/// double in RESP3, with the same digits.
fn put_coord(out: &mut Out, v: f64) {
    out.resp3_text(b',', &human(v));
}

/// C's `(long long)` of a double as x86-64 converts it (WITHHASH).
fn score_int(s: f64) -> i64 {
    const TWO63: f64 = 9_223_372_036_854_775_808.0;
    if (-TWO63..TWO63).contains(&s) {
        s as i64
    } else {
        i64::MIN
    }
}

// ---------------------------------------------------------------------------
// GEOADD

/// GEOADD key [NX|XX] [CH] lon lat member ...: Redis turns it into
/// `zadd key [options] score member ...` and runs ZADD, so it is logged as
/// that ZADD when it changed something.
fn geoadd(ctx: &mut Ctx, args: &[Bytes]) {
    let (mut nx, mut xx) = (false, false);
    let mut first = 2;
    while let Some(a) = args.get(first) {
        if c_str_eq(a, "nx") {
            nx = true;
        } else if c_str_eq(a, "xx") {
            xx = true;
        } else if !c_str_eq(a, "ch") {
            break;
        }
        first += 1;
    }
    if !(args.len() - first).is_multiple_of(3) || (nx && xx) {
        return ctx.error(SYNTAX);
    }
    let mut zadd = Vec::with_capacity(first + (args.len() - first) / 3 * 2);
    zadd.push(Bytes::from_static(b"zadd"));
    zadd.extend_from_slice(&args[1..first]);
    for el in args[first..].chunks(3) {
        let Some((lon, lat)) = lon_lat(ctx, &el[0], &el[1]) else {
            return;
        };
        let score = score_of(lon, lat).unwrap_or(0);
        zadd.push(Bytes::copy_from_slice(
            itoa::Buffer::new().format(score).as_bytes(),
        ));
        zadd.push(el[2].clone());
    }
    if zadd_generic(ctx, &zadd, false) {
        ctx.conn.rewrite = Some(vec![(ctx.conn.db, zadd)]);
    }
}

// ---------------------------------------------------------------------------
// GEODIST, GEOHASH, GEOPOS

fn geodist(ctx: &mut Ctx, args: &[Bytes]) {
    let to_m = match args.len() {
        4 => 1.0,
        5 => match unit(ctx, &args[4]) {
            Some(u) => u,
            None => return,
        },
        _ => return ctx.error(SYNTAX),
    };
    let (db, out) = ctx.db_out();
    let Some(z) = typed(out, db.read::<ZSet>(&args[1])) else {
        return;
    };
    let scores = z.and_then(|z| Some((z.score(&args[2])?, z.score(&args[3])?)));
    let Some((a, b)) = scores else {
        return out.null();
    };
    let ((lon1, lat1), (lon2, lat2)) = (decode_score(a), decode_score(b));
    put_distance(out, distance(lon1, lat1, lon2, lat2) / to_m);
}

fn geohash(ctx: &mut Ctx, args: &[Bytes]) {
    per_member(ctx, args, |out, pos| match pos {
        Some((lon, lat)) => out.bulk(&geohash_string(lon, lat)),
        None => out.null(),
    });
}

fn geopos(ctx: &mut Ctx, args: &[Bytes]) {
    per_member(ctx, args, |out, pos| match pos {
        Some((lon, lat)) => {
            out.array(2);
            put_coord(out, lon);
            put_coord(out, lat);
        }
        None => out.null_array(),
    });
}

/// GEOHASH and GEOPOS: an array with one entry per member, written by
/// `put` from the member's decoded position (None: no such member or key).
fn per_member(ctx: &mut Ctx, args: &[Bytes], put: fn(&mut Out, Option<(f64, f64)>)) {
    let (db, out) = ctx.db_out();
    let Some(z) = typed(out, db.read::<ZSet>(&args[1])) else {
        return;
    };
    out.array(args.len() - 2);
    for m in &args[2..] {
        put(out, z.and_then(|z| z.score(m)).map(decode_score));
    }
}

// ---------------------------------------------------------------------------
// GEORADIUS, GEORADIUSBYMEMBER, GEOSEARCH and their variants

/// Which command runs the search (Redis's georadiusGeneric flags).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Form {
    /// GEORADIUS[_RO] key lon lat radius unit ...
    Coords { store: bool },
    /// GEORADIUSBYMEMBER[_RO] key member radius unit ...
    Member { store: bool },
    /// GEOSEARCH key ...
    Search,
    /// GEOSEARCHSTORE dst key ...
    SearchStore,
}

impl Form {
    fn is_search(self) -> bool {
        matches!(self, Form::Search | Form::SearchStore)
    }

    /// Whether STORE and STOREDIST take a key (the GEORADIUS forms).
    fn store_option(self) -> bool {
        matches!(
            self,
            Form::Coords { store: true } | Form::Member { store: true }
        )
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Sort {
    None,
    Asc,
    Desc,
}

/// One point found: its member (in `Found::bytes`), distance from the
/// centre in meters, score and decoded position.
struct Point {
    at: usize,
    len: usize,
    dist: f64,
    score: f64,
    lon: f64,
    lat: f64,
}

#[derive(Default)]
struct Found {
    bytes: Vec<u8>,
    points: Vec<Point>,
}

impl Found {
    fn member(&self, p: &Point) -> &[u8] {
        &self.bytes[p.at..p.at + p.len]
    }
}

/// Every member of `z` inside `shape`, in the order Redis's scan finds
/// them (membersOfAllNeighbors): the cells in order, skipping a cell equal
/// to the last one scanned, each cell's members by score; with `limit`
/// (ANY) it stops once that many are found.
fn scan(z: &ZSet, shape: &Shape, limit: usize) -> Found {
    let mut f = Found::default();
    let cells = search_cells(shape);
    let full = |f: &Found| limit > 0 && f.points.len() >= limit;
    let mut last = 0;
    for (i, &cell) in cells.iter().enumerate() {
        if cell.is_zero() || (last != 0 && cell == cells[last]) {
            continue;
        }
        if full(&f) {
            break;
        }
        let (min, max) = cell_scores(cell);
        let range = ScoreRange {
            min: min as f64,
            max: max as f64,
            min_excl: false,
            max_excl: true,
        };
        for (m, s) in z.range_by_score(&range, false, 0, None) {
            let (lon, lat) = decode_score(s);
            if let Some(dist) = shape.contains(lon, lat) {
                f.points.push(Point {
                    at: f.bytes.len(),
                    len: m.len(),
                    dist,
                    score: s,
                    lon,
                    lat,
                });
                f.bytes.extend_from_slice(m);
            }
            if full(&f) {
                break;
            }
        }
        last = i;
    }
    f
}

/// Redis's sort_gp_asc on distances (NaN sorts as smaller).
fn by_dist(a: &Point, b: &Point) -> std::cmp::Ordering {
    use std::cmp::Ordering::*;
    if a.dist > b.dist {
        Greater
    } else if a.dist == b.dist {
        Equal
    } else {
        Less
    }
}

/// The options of a search (everything after the fixed arguments).
struct Opts<'a> {
    withdist: bool,
    withhash: bool,
    withcoord: bool,
    sort: Sort,
    any: bool,
    count: i64,
    store: Option<&'a Bytes>,
    storedist: bool,
    center: Option<(f64, f64)>,
    extent: Option<(Extent, f64)>,
}

/// Redis's georadiusGeneric: the source key at `args[src]`.
fn search(ctx: &mut Ctx, args: &[Bytes], src: usize, form: Form) {
    let key = &args[src];
    let exists = {
        let (db, out) = ctx.db_out();
        match typed(out, db.read::<ZSet>(key)) {
            None => return,
            Some(z) => z.is_some(),
        }
    };
    let Some(o) = parse(ctx, args, src, form, exists) else {
        return;
    };
    if !exists {
        return match o.store {
            Some(dst) => {
                settle_dst(ctx, dst, form);
                ctx.db().remove(dst);
                ctx.out.int(0);
            }
            None => ctx.out.array(0),
        };
    }
    let (Some((lon, lat)), Some((extent, to_m))) = (o.center, o.extent) else {
        return ctx.out.array(0);
    };
    let shape = Shape {
        lon,
        lat,
        extent,
        to_m,
    };
    let mut sort = o.sort;
    if o.count != 0 && sort == Sort::None && !o.any {
        sort = Sort::Asc;
    }
    let limit = if o.any { o.count as usize } else { 0 };
    let Some(z) = peek_zset(ctx.db(), key) else {
        return ctx.out.array(0);
    };
    let mut found = scan(z, &shape, limit);
    if found.points.is_empty() && o.store.is_none() {
        return ctx.out.array(0);
    }
    let total = found.points.len();
    let n = match usize::try_from(o.count) {
        Ok(c) if c > 0 && c < total => c,
        _ => total,
    };
    let pts = &mut found.points;
    match sort {
        Sort::None => {}
        Sort::Asc if n == total => pts.sort_by(by_dist),
        Sort::Desc if n == total => pts.sort_by(|a, b| by_dist(b, a)),
        Sort::Asc => partial_sort(pts, &by_dist, 0, n - 1),
        Sort::Desc => partial_sort(pts, &|a: &Point, b: &Point| by_dist(b, a), 0, n - 1),
    }
    let pts = &found.points[..n];
    if let Some(dst) = o.store {
        settle_dst(ctx, dst, form);
        let ev = if form.is_search() {
            "geosearchstore"
        } else {
            "georadiusstore"
        };
        let items = pts.iter().map(|p| {
            let score = if o.storedist { p.dist / to_m } else { p.score };
            (found.member(p), score)
        });
        let stored = store_result(ctx, dst, items, ev);
        // Redis counts one change per member stored.
        ctx.store.ks.add_dirty(stored.saturating_sub(1) as u64);
        return;
    }
    let out = &mut *ctx.out;
    let extra = o.withdist as usize + o.withhash as usize + o.withcoord as usize;
    out.array(n);
    for p in pts {
        if extra > 0 {
            out.array(extra + 1);
        }
        out.bulk(found.member(p));
        if o.withdist {
            put_distance(out, p.dist / to_m);
        }
        if o.withhash {
            out.int(score_int(p.score));
        }
        if o.withcoord {
            out.array(2);
            put_coord(out, p.lon);
            put_coord(out, p.lat);
        }
    }
}

/// A GEORADIUS STORE destination is not among the spec's key positions:
/// a queued lock key there is settled first, as SORT's STORE does.
fn settle_dst(ctx: &mut Ctx, dst: &Bytes, form: Form) {
    if form.store_option() && !ctx.store.ks.blocking.is_empty() {
        settle_queued_key(ctx, dst);
    }
}

/// The fixed arguments and the options, checked in Redis's order; None
/// after replying an error.
fn parse<'a>(
    ctx: &mut Ctx,
    args: &'a [Bytes],
    src: usize,
    form: Form,
    exists: bool,
) -> Option<Opts<'a>> {
    let mut o = Opts {
        withdist: false,
        withhash: false,
        withcoord: false,
        sort: Sort::None,
        any: false,
        count: 0,
        store: None,
        storedist: false,
        center: None,
        extent: None,
    };
    let base = match form {
        Form::Coords { .. } => {
            o.center = Some(lon_lat(ctx, &args[2], &args[3])?);
            let (r, to_m) = radius_arg(ctx, &args[4..6])?;
            o.extent = Some((Extent::Radius(r), to_m));
            6
        }
        // No source: the options are still parsed, for the reply's kind.
        Form::Member { .. } if !exists => 5,
        Form::Member { .. } => {
            let Some(c) = member_pos(ctx, &args[src], &args[2]) else {
                ctx.error(NOT_MEMBER);
                return None;
            };
            o.center = Some(c);
            let (r, to_m) = radius_arg(ctx, &args[3..5])?;
            o.extent = Some((Extent::Radius(r), to_m));
            5
        }
        Form::Search => 2,
        Form::SearchStore => {
            o.store = Some(&args[1]);
            3
        }
    };
    let search = form.is_search();
    let (mut frommember, mut fromloc, mut byradius, mut bybox) = (false, false, false, false);
    let mut i = base;
    while i < args.len() {
        let a = &args[i];
        let left = args.len() - i - 1;
        if c_str_eq(a, "withdist") {
            o.withdist = true;
        } else if c_str_eq(a, "withhash") {
            o.withhash = true;
        } else if c_str_eq(a, "withcoord") {
            o.withcoord = true;
        } else if c_str_eq(a, "any") {
            o.any = true;
        } else if c_str_eq(a, "asc") {
            o.sort = Sort::Asc;
        } else if c_str_eq(a, "desc") {
            o.sort = Sort::Desc;
        } else if c_str_eq(a, "count") && left >= 1 {
            let n = arg_i64(ctx, &args[i + 1])?;
            if n <= 0 {
                ctx.error("ERR COUNT must be > 0");
                return None;
            }
            o.count = n;
            i += 1;
        } else if (c_str_eq(a, "store") || c_str_eq(a, "storedist"))
            && left >= 1
            && form.store_option()
        {
            o.store = Some(&args[i + 1]);
            o.storedist = c_str_eq(a, "storedist");
            i += 1;
        } else if c_str_eq(a, "storedist") && form == Form::SearchStore {
            o.storedist = true;
        } else if c_str_eq(a, "frommember") && left >= 1 && search && !fromloc {
            if exists {
                let Some(c) = member_pos(ctx, &args[src], &args[i + 1]) else {
                    ctx.error(NOT_MEMBER);
                    return None;
                };
                o.center = Some(c);
            }
            frommember = true;
            i += 1;
        } else if c_str_eq(a, "fromlonlat") && left >= 2 && search && !frommember {
            o.center = Some(lon_lat(ctx, &args[i + 1], &args[i + 2])?);
            fromloc = true;
            i += 2;
        } else if c_str_eq(a, "byradius") && left >= 2 && search && !bybox {
            let (r, to_m) = radius_arg(ctx, &args[i + 1..i + 3])?;
            o.extent = Some((Extent::Radius(r), to_m));
            byradius = true;
            i += 2;
        } else if c_str_eq(a, "bybox") && left >= 3 && search && !byradius {
            let (width, height, to_m) = box_arg(ctx, &args[i + 1..i + 4])?;
            o.extent = Some((Extent::Box { width, height }, to_m));
            bybox = true;
            i += 3;
        } else {
            ctx.error(SYNTAX);
            return None;
        }
        i += 1;
    }
    let name = || String::from_utf8_lossy(c_str(&args[0])).into_owned();
    let err = if o.store.is_some() && (o.withdist || o.withhash || o.withcoord) {
        let what = if form == Form::SearchStore {
            "GEOSEARCHSTORE"
        } else {
            "STORE option in GEORADIUS"
        };
        Some(format!(
            "ERR {what} is not compatible with WITHDIST, WITHHASH and WITHCOORD options"
        ))
    } else if search && !(frommember || fromloc) {
        Some(format!(
            "ERR exactly one of FROMMEMBER or FROMLONLAT can be specified for {}",
            name()
        ))
    } else if search && !(byradius || bybox) {
        Some(format!(
            "ERR exactly one of BYRADIUS and BYBOX can be specified for {}",
            name()
        ))
    } else if o.any && o.count == 0 {
        Some("ERR the ANY argument requires COUNT argument".to_string())
    } else {
        None
    };
    if let Some(e) = err {
        ctx.error(&e);
        return None;
    }
    Some(o)
}

fn georadius(ctx: &mut Ctx, args: &[Bytes]) {
    search(ctx, args, 1, Form::Coords { store: true });
}

fn georadius_ro(ctx: &mut Ctx, args: &[Bytes]) {
    search(ctx, args, 1, Form::Coords { store: false });
}

fn georadiusbymember(ctx: &mut Ctx, args: &[Bytes]) {
    search(ctx, args, 1, Form::Member { store: true });
}

fn georadiusbymember_ro(ctx: &mut Ctx, args: &[Bytes]) {
    search(ctx, args, 1, Form::Member { store: false });
}

fn geosearch(ctx: &mut Ctx, args: &[Bytes]) {
    search(ctx, args, 1, Form::Search);
}

fn geosearchstore(ctx: &mut Ctx, args: &[Bytes]) {
    search(ctx, args, 2, Form::SearchStore);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn args(cmd: &str) -> Vec<Bytes> {
        cmd.split(' ').map(|a| Bytes::from(a.to_string())).collect()
    }

    /// What each command leaves for the AOF, as Redis 7.0.15 wrote it:
    /// GEOADD as the ZADD it ran (only when it changed the set), the
    /// searches as they were typed.
    #[test]
    fn geoadd_is_logged_as_the_zadd_it_ran() {
        let mut store = Store::new(Config::default(), crate::commands::acl_catalog());
        let mut run = |cmd: &str| {
            let a: Vec<&str> = cmd.split(' ').collect();
            super::super::call_for_test(&mut store, 0, &a)
        };
        let (r, _) = run("GEOADD g 13.361389 38.115556 Palermo 15.087269 37.502669 Catania");
        assert_eq!(
            r.rewrite,
            Some(vec![(
                0,
                args("zadd g 3479099956230698 Palermo 3479447370796909 Catania")
            )])
        );
        let (r, _) = run("GEOADD g CH XX 13.361389 38.115556 Palermo 1 1 new");
        assert_eq!((r.dirty, r.rewrite), (0, None));
        let (r, _) = run("GEOADD g ch nx 1 2 x");
        assert_eq!(
            r.rewrite,
            Some(vec![(0, args("zadd g ch nx 3378080408407459 x"))])
        );
        let (r, _) = run("GEOADD g 200 0 bad");
        assert_eq!((r.dirty, r.rewrite), (0, None));
        let (r, reply) = run("GEORADIUS g 15 37 200 km STORE dst");
        assert!(r.dirty > 0);
        assert_eq!(r.rewrite, None);
        assert_eq!(reply, b":2\r\n");
    }
}
