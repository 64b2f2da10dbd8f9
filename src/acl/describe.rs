//! Rules back as text (ACL LIST, GETUSER, SAVE), as Redis 7.0 writes them:
//! `+@all` or `-@all`, then the categories that best fit the command
//! bitmap, then single commands and allowed first arguments to make it
//! exact.
//!
//! Must not touch users, the log or the command table: it reads the
//! `Selector` and the `Catalog` it is given and returns text.

use super::{Catalog, Selector, CATEGORIES, KEY_ALL, KEY_READ, KEY_WRITE};

pub fn key_pattern(out: &mut Vec<u8>, flags: u8, pat: &[u8]) {
    out.extend_from_slice(match flags {
        KEY_ALL => b"~".as_slice(),
        KEY_READ => b"%R~",
        KEY_WRITE => b"%W~",
        _ => b"~",
    });
    out.extend_from_slice(pat);
}

/// Keys, channels and commands of a selector, space separated.
pub fn selector(cat: &Catalog, s: &Selector) -> Vec<u8> {
    let mut out = Vec::new();
    if s.allkeys {
        out.extend_from_slice(b"~* ");
    } else {
        for (flags, pat) in &s.keys {
            key_pattern(&mut out, *flags, pat);
            out.push(b' ');
        }
    }
    if s.allchannels {
        out.extend_from_slice(b"&* ");
    } else {
        out.extend_from_slice(b"resetchannels ");
        for c in &s.channels {
            out.push(b'&');
            out.extend_from_slice(c);
            out.push(b' ');
        }
    }
    out.extend_from_slice(&commands(cat, s));
    out
}

/// Redis's ACLDescribeSelectorCommandRules.
pub fn commands(cat: &Catalog, s: &Selector) -> Vec<u8> {
    let mut rules: Vec<u8> = Vec::new();
    // Rules are applied to `fake` as they are written, so what is still
    // different is known; `temp` tracks the categories not yet covered.
    let mut fake = Selector::new(cat, false, false);
    let additive = !s.bit(cat.future_bit());
    if additive {
        rules.extend_from_slice(b"-@all ");
        fake.set_all(false);
    } else {
        rules.extend_from_slice(b"+@all ");
        fake.set_all(true);
    }
    let mut temp = Selector::new(cat, false, false);
    temp.bits = s.bits.clone();
    let mut applied = [false; 32];
    loop {
        let mut best: Option<usize> = None;
        let (mut mindiff, mut maxsame) = (usize::MAX, 0);
        for (j, _) in CATEGORIES.iter().enumerate() {
            if applied[j] {
                continue;
            }
            let (on, off) = temp.count(cat, 1 << j);
            let (diff, same) = if additive { (off, on) } else { (on, off) };
            if same > diff && (diff < mindiff || (diff == mindiff && same > maxsame)) {
                best = Some(j);
                mindiff = diff;
                maxsame = same;
            }
        }
        let Some(j) = best else { break };
        fake.category(cat, 1 << j, additive);
        temp.category(cat, 1 << j, !additive);
        rules.push(if additive { b'+' } else { b'-' });
        rules.push(b'@');
        rules.extend_from_slice(CATEGORIES[j].as_bytes());
        rules.push(b' ');
        applied[j] = true;
    }
    for top in cat.tops() {
        single(cat, s, &mut fake, &mut rules, top);
        for &sub in &cat.entry(top).subs {
            single(cat, s, &mut fake, &mut rules, sub);
        }
    }
    rules.pop();
    debug_assert_eq!(fake.bits, s.bits, "described rules rebuild the bitmap");
    rules
}

fn single(cat: &Catalog, s: &Selector, fake: &mut Selector, rules: &mut Vec<u8>, i: usize) {
    let user = s.bit(i);
    if user != fake.bit(i) {
        rules.push(if user { b'+' } else { b'-' });
        rules.extend_from_slice(cat.entry(i).name.as_bytes());
        rules.push(b' ');
        fake.change(cat, i, user);
    }
    if !user {
        if let Some(args) = s.firstargs.get(&i) {
            for a in args {
                rules.push(b'+');
                rules.extend_from_slice(cat.entry(i).name.as_bytes());
                rules.push(b'|');
                rules.extend_from_slice(a);
                rules.push(b' ');
            }
        }
    }
}
