//! Unit tests of `crate::acl` on a small hand-made `Catalog`: the module's
//! own items only, never the command table, a server or a file on disk.

use super::*;

/// A small table: get (read, string, fast), set (write, string),
/// config with get/set subcommands (admin), select (connection).
fn catalog() -> Catalog {
    let cat = |names: &[&str]| names.iter().fold(0, |b, n| b | category_bit(n.as_bytes()));
    Catalog::new(vec![
        CatalogEntry {
            name: "get".into(),
            parent: None,
            subs: vec![],
            cats: cat(&["read", "string", "fast"]),
        },
        CatalogEntry {
            name: "set".into(),
            parent: None,
            subs: vec![],
            cats: cat(&["write", "string", "slow"]),
        },
        CatalogEntry {
            name: "config".into(),
            parent: None,
            subs: vec![3, 4],
            cats: cat(&["slow"]),
        },
        CatalogEntry {
            name: "config|get".into(),
            parent: Some(2),
            subs: vec![],
            cats: cat(&["admin", "slow"]),
        },
        CatalogEntry {
            name: "config|set".into(),
            parent: Some(2),
            subs: vec![],
            cats: cat(&["admin", "slow"]),
        },
        CatalogEntry {
            name: "select".into(),
            parent: None,
            subs: vec![],
            cats: cat(&["connection", "fast"]),
        },
    ])
}

fn user(rules: &[&str]) -> (Catalog, User) {
    let c = catalog();
    let mut u = User::new(&c, b"u", false);
    for r in rules {
        u.apply(&c, r.as_bytes(), false).unwrap();
    }
    (c, u)
}

fn text(c: &Catalog, u: &User) -> String {
    String::from_utf8(u.describe(c)).unwrap()
}

#[test]
fn default_user_is_described_as_redis_does() {
    let c = catalog();
    let d = User::default_user(&c);
    assert_eq!(text(&c, &d), "on nopass ~* &* +@all");
}

#[test]
fn rules_come_back_as_categories_then_single_commands() {
    // Only get is left of @string: @read fits it exactly.
    let (c, u) = user(&["+@string", "-set", "+config|get"]);
    assert_eq!(text(&c, &u), "off resetchannels -@all +@read +config|get");
    let (c, u) = user(&["+@string", "+select", "-get"]);
    assert_eq!(text(&c, &u), "off resetchannels -@all +@write +@connection");
    let (c, u) = user(&["+@all", "-config", "+config|get"]);
    assert_eq!(text(&c, &u), "off resetchannels +@all -config +config|get");
    let (c, u) = user(&["+select|0", "+select|1", "+SELECT|0"]);
    assert_eq!(text(&c, &u), "off resetchannels -@all +select|0 +select|1");
}

#[test]
fn bad_rules_are_refused_with_redis_errors() {
    let c = catalog();
    let mut u = User::new(&c, b"u", false);
    let e = |u: &mut User, r: &str| u.apply(&c, r.as_bytes(), false).unwrap_err();
    assert_eq!(e(&mut u, "+nosuch"), RuleError::NoEnt);
    assert_eq!(e(&mut u, "+@nosuch"), RuleError::NoEnt);
    assert_eq!(e(&mut u, "+config|get|x"), RuleError::SubFirstArg);
    assert_eq!(e(&mut u, "+select|"), RuleError::Syntax);
    assert_eq!(e(&mut u, "%~k"), RuleError::Syntax);
    assert_eq!(e(&mut u, "%X~k"), RuleError::Syntax);
    assert_eq!(e(&mut u, "#abc"), RuleError::BadHash);
    assert_eq!(e(&mut u, "<nopw"), RuleError::NoPassword);
    assert_eq!(e(&mut u, "bogus"), RuleError::Syntax);
    u.apply(&c, b"allkeys", false).unwrap();
    assert_eq!(e(&mut u, "~k"), RuleError::KeysAll);
    u.apply(&c, b"allchannels", false).unwrap();
    assert_eq!(e(&mut u, "&c"), RuleError::ChannelsAll);
}

#[test]
fn passwords_are_kept_as_sha256() {
    let (_, u) = user(&["on", ">secret"]);
    assert_eq!(
        u.passwords(),
        ["2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b"]
    );
    assert!(u.password_ok(b"secret"));
    assert!(!u.password_ok(b"Secret"));
}

fn check(
    c: &Catalog,
    u: &User,
    cmd: &str,
    args: &[&str],
    keys: &[(usize, u8)],
) -> Result<(), (Denial, usize)> {
    let args: Vec<bytes::Bytes> = args
        .iter()
        .map(|a| bytes::Bytes::copy_from_slice(a.as_bytes()))
        .collect();
    let keys = keys.to_vec();
    let find = move || keys.clone();
    let mut q = Query {
        cmd: c.lookup(cmd.as_bytes()).unwrap(),
        sub: cmd.contains('|'),
        no_auth: false,
        args: &args,
        find_keys: &find,
        found: None,
        channels: &[],
    };
    u.check(&mut q)
}

#[test]
fn keys_need_the_permission_the_command_uses() {
    let (c, u) = user(&["+@all", "~lock:*", "%R~ro:*"]);
    assert!(check(&c, &u, "get", &["get", "lock:1"], &[(1, KEY_READ)]).is_ok());
    assert!(check(&c, &u, "get", &["get", "ro:1"], &[(1, KEY_READ)]).is_ok());
    assert_eq!(
        check(&c, &u, "set", &["set", "ro:1", "v"], &[(1, KEY_WRITE)]),
        Err((Denial::Key, 1))
    );
    let (c, u) = user(&["+get"]);
    assert_eq!(
        check(&c, &u, "set", &["set", "k", "v"], &[(1, KEY_WRITE)]),
        Err((Denial::Command, 0))
    );
    // A selector may allow what the root one does not.
    let (c, u) = user(&["+get", "~a*", "(+set ~b*)"]);
    assert!(check(&c, &u, "set", &["set", "b1", "v"], &[(1, KEY_WRITE)]).is_ok());
    assert_eq!(
        check(&c, &u, "set", &["set", "a1", "v"], &[(1, KEY_WRITE)]),
        Err((Denial::Key, 1))
    );
}

#[test]
fn selectors_may_span_arguments() {
    let args: Vec<&[u8]> = vec![b"on", b"(~a", b"+get)", b"(&c)"];
    assert_eq!(
        merge_selector_args(&args).unwrap(),
        vec![b"on".to_vec(), b"(~a +get)".to_vec(), b"(&c)".to_vec()]
    );
    assert_eq!(merge_selector_args(&[b"(~a".as_slice()]), Err(0));
}

#[test]
fn an_acl_file_round_trips() {
    let c = std::sync::Arc::new(catalog());
    let mut users = Users::new(c);
    users
        .set_user(
            b"alice",
            &[
                b"on".to_vec(),
                b">pw".to_vec(),
                b"~k*".to_vec(),
                b"+get".to_vec(),
            ],
            false,
        )
        .unwrap();
    let text = users.file_text();
    let parsed = users.parse_file(&text, "users.acl", false).unwrap();
    assert_eq!(parsed.get(b"alice".as_slice()), users.get(b"alice"));
    let err = users
        .parse_file(b"user bob +nosuch\nbogus\n", "f", false)
        .unwrap_err();
    assert_eq!(
        err,
        "f:1: Error in applying operation '+nosuch': Unknown command or category name in ACL. f:2 should start with user keyword followed by the username. WARNING: ACL errors detected, no change to the previously active ACL rules was performed"
    );
}

#[test]
fn secrets() {
    assert!(same_secret(b"abc", b"abc"));
    assert!(!same_secret(b"abc", b"abd"));
    assert!(!same_secret(b"abc", b"abc\0"));
    assert!(same_secret(b"", b""));
}
