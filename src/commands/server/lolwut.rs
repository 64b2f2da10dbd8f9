//! LOLWUT [VERSION v] [...]: Redis's computer art. Version 5 draws Georg
//! Nees's Schotter in Braille dots, version 6 a Plaguemon-style skyline in
//! the terminal's four grays; any other version (the default, 7) prints the
//! server version, as Redis 7.0 does.
//!
//! Must not touch the store: the art comes from the arguments and a random
//! source only (and `version::REDIS_VERSION`).

use bytes::Bytes;
use rand::Rng;

use super::*;
use crate::version::REDIS_VERSION;

/// A grid of small color values, out-of-range reads are 0 and writes
/// are dropped (Redis's lwCanvas).
struct Canvas {
    w: i64,
    h: i64,
    px: Vec<u8>,
}

impl Canvas {
    fn new(w: i64, h: i64, bg: u8) -> Canvas {
        Canvas {
            w,
            h,
            px: vec![bg; (w * h) as usize],
        }
    }

    fn set(&mut self, x: i64, y: i64, c: u8) {
        if (0..self.w).contains(&x) && (0..self.h).contains(&y) {
            self.px[(x + y * self.w) as usize] = c;
        }
    }

    fn get(&self, x: i64, y: i64) -> u8 {
        if (0..self.w).contains(&x) && (0..self.h).contains(&y) {
            self.px[(x + y * self.w) as usize]
        } else {
            0
        }
    }

    /// Bresenham's line.
    fn line(&mut self, (mut x, mut y): (i64, i64), (x2, y2): (i64, i64)) {
        let (dx, dy) = ((x2 - x).abs(), (y2 - y).abs());
        let (sx, sy) = (if x < x2 { 1 } else { -1 }, if y < y2 { 1 } else { -1 });
        let mut err = dx - dy;
        loop {
            self.set(x, y, 1);
            if x == x2 && y == y2 {
                break;
            }
            let e2 = err * 2;
            if e2 > -dy {
                err -= dy;
                x += sx;
            }
            if e2 < dx {
                err += dx;
                y += sy;
            }
        }
    }

    /// A square of side `size` centred on (x, y), turned by `angle`: its
    /// corners are points of the circumscribed circle, a quarter turn apart.
    fn square(&mut self, x: i64, y: i64, size: f32, angle: f32) {
        let r = (size / std::f32::consts::SQRT_2).round() as f64;
        let mut k = std::f64::consts::FRAC_PI_4 + angle as f64;
        let mut p = [(0i64, 0i64); 4];
        for c in &mut p {
            *c = (
                (k.sin() * r + x as f64).round() as i64,
                (k.cos() * r + y as f64).round() as i64,
            );
            k += std::f64::consts::FRAC_PI_2;
        }
        for j in 0..4 {
            self.line(p[j], p[(j + 1) % 4]);
        }
    }
}

pub(super) fn lolwut(ctx: &mut Ctx, args: &[Bytes]) {
    let mut version = 7;
    let mut rest = &args[1..];
    if args.len() >= 3 && args[1].eq_ignore_ascii_case(b"version") {
        let Some(v) = arg_i64(ctx, &args[2]) else {
            return;
        };
        // Redis prints it as an unsigned int to pick the version.
        version = v as u32 as i64;
        rest = &args[3..];
    }
    let text = match version {
        5 => schotter(ctx, rest),
        6 => skyline(ctx, rest),
        _ => Some(format!("Redis ver. {REDIS_VERSION}\n")),
    };
    if let Some(t) = text {
        ctx.out.verbatim(t.as_bytes());
    }
}

/// The optional integer arguments, each clamped to `lo..=hi`; None after
/// replying the error for one that is not an integer.
fn params<const N: usize>(
    ctx: &mut Ctx,
    args: &[Bytes],
    mut vals: [i64; N],
    lo: [i64; N],
    hi: [i64; N],
) -> Option<[i64; N]> {
    for (i, a) in args.iter().take(N).enumerate() {
        vals[i] = arg_i64(ctx, a)?;
    }
    for i in 0..N {
        vals[i] = vals[i].clamp(lo[i], hi[i]);
    }
    Some(vals)
}

/// LOLWUT 5 [cols] [squares-per-row] [squares-per-col].
fn schotter(ctx: &mut Ctx, args: &[Bytes]) -> Option<String> {
    let [cols, per_row, per_col] = params(ctx, args, [66, 8, 12], [1, 1, 1], [1000, 200, 200])?;
    let width = cols * 2;
    let pad = if width > 4 { 2 } else { 0 };
    let side = (width - pad * 2) as f32 / per_row as f32;
    let height = (side * per_col as f32) as i64 + pad * 2;
    let mut c = Canvas::new(width, height, 0);
    let mut rng = rand::thread_rng();
    for y in 0..per_col {
        for x in 0..per_row {
            let mut sx = (x as f32 * side + side / 2.0 + pad as f32) as i64;
            let mut sy = (y as f32 * side + side / 2.0 + pad as f32) as i64;
            let mut angle = 0.0;
            // Lower rows are turned and moved more and more at random.
            if y > 1 {
                let mut r = || {
                    let v = rng.gen::<f32>() / per_col as f32 * y as f32;
                    if rng.gen::<bool>() {
                        -v
                    } else {
                        v
                    }
                };
                let (r1, r2, r3) = (r(), r(), r());
                angle = r1;
                sx += (r2 * side / 3.0) as i64;
                sy += (r3 * side / 3.0) as i64;
            }
            c.square(sx, sy, side, angle);
        }
    }
    // Each Braille character shows a 2x4 block of dots.
    let mut t = String::new();
    let mut y = 0;
    while y < c.h {
        let mut x = 0;
        while x < c.w {
            let bits = [
                (0, 0),
                (0, 1),
                (0, 2),
                (1, 0),
                (1, 1),
                (1, 2),
                (0, 3),
                (1, 3),
            ];
            let mut byte = 0u32;
            for (b, (dx, dy)) in bits.iter().enumerate() {
                if c.get(x + dx, y + dy) != 0 {
                    byte |= 1 << b;
                }
            }
            t.push(char::from_u32(0x2800 + byte).unwrap_or(' '));
            x += 2;
        }
        if y != c.h - 1 {
            t.push('\n');
        }
        y += 4;
    }
    t.push_str("\nGeorg Nees - schotter, plotter on paper, 1968. Redis ver. ");
    t.push_str(REDIS_VERSION);
    t.push('\n');
    Some(t)
}

/// LOLWUT 6 [cols] [rows].
fn skyline(ctx: &mut Ctx, args: &[Bytes]) -> Option<String> {
    let [cols, rows] = params(ctx, args, [80, 20], [1, 1], [1000, 1000])?;
    let mut c = Canvas::new(cols, rows, 3);
    let mut rng = rand::thread_rng();
    let h = c.h;
    // Background buildings without windows, the lighter gray behind.
    for color in [2u8, 1] {
        let mut off = -10;
        while off < c.w {
            off += rng.gen_range(0..8);
            let width = 10 + rng.gen_range(0..9);
            let height = if color == 2 {
                h / 2 + rng.gen_range(0..h) / 2
            } else {
                h / 2 + rng.gen_range(0..h) / 3
            };
            building(&mut c, &mut rng, off, width, height, false, color);
            off += if color == 2 { width / 2 } else { width + 1 };
        }
    }
    // Black foreground buildings with lit windows.
    let mut off = -10;
    while off < c.w {
        off += rng.gen_range(0..8);
        let mut width = 5 + rng.gen_range(0..14);
        if width % 4 != 0 {
            width += width % 3;
        }
        let height = h / 3 + rng.gen_range(0..h) / 2;
        building(&mut c, &mut rng, off, width, height, true, 0);
        off += width + 5;
    }
    let mut t = String::new();
    for y in 0..c.h {
        for x in 0..c.w {
            let esc = match c.get(x, y) {
                1 => "0;90;100m",
                2 => "0;37;47m",
                3 => "0;97;107m",
                _ => "0;30;40m",
            };
            t.push_str(&format!("\x1b[{esc} \x1b[0m"));
        }
        if y != c.h - 1 {
            t.push('\n');
        }
    }
    t.push_str("\nDedicated to the 8 bit game developers of past and present.\n");
    t.push_str("Original 8 bit image from Plaguemon by hikikomori. Redis ver. ");
    t.push_str(REDIS_VERSION);
    t.push('\n');
    Some(t)
}

/// One building standing on the canvas's bottom row; its roof is two
/// pixels narrower on each side; windows are two pixels wide, one tall,
/// in one of the grays other than the building's.
fn building(
    c: &mut Canvas,
    rng: &mut impl Rng,
    xoff: i64,
    width: i64,
    height: i64,
    windows: bool,
    color: u8,
) {
    let bottom = c.h - 1;
    let top = bottom - height + 1;
    for y in (top..=bottom).rev() {
        for x in xoff..xoff + width {
            if y == top && (x <= xoff + 1 || x >= xoff + width - 2) {
                continue;
            }
            let mut px = color;
            if windows && x > xoff + 1 && x < xoff + width - 2 && y > top + 1 && y < bottom - 1 {
                let (rx, ry) = (x - (xoff + 1), y - (top + 1));
                if (rx / 2) % 2 != 0 && ry % 2 != 0 {
                    px = loop {
                        let v = 1 + rng.gen_range(0..2u8);
                        if v != color {
                            break v;
                        }
                    };
                    if rx % 2 != 0 {
                        px = c.get(x - 1, y);
                    }
                }
            }
            c.set(x, y, px);
        }
    }
}
