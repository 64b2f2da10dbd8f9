//! Connection commands through real sockets, byte for byte as Redis 7.0.15
//! answers them: AUTH, HELLO, CLIENT KILL, CLIENT REPLY, RESET.

use std::io::Write;
use std::time::Duration;

use latchkey_server::config::Config;
use latchkey_server::runtime::ServerHandle;

mod common;
use common::*;

fn server(pass: Option<&str>) -> ServerHandle {
    start_with(Config {
        port: 0,
        requirepass: pass.map(String::from),
        ..Default::default()
    })
}

fn hello_reply(resp3: bool, id: i64) -> String {
    let body = format!(
        "$6\r\nserver\r\n$5\r\nredis\r\n$7\r\nversion\r\n$6\r\n7.0.15\r\n$5\r\nproto\r\n:{}\r\n$2\r\nid\r\n:{id}\r\n$4\r\nmode\r\n$10\r\nstandalone\r\n$4\r\nrole\r\n$6\r\nmaster\r\n$7\r\nmodules\r\n*0\r\n",
        if resp3 { 3 } else { 2 }
    );
    if resp3 {
        format!("%7\r\n{body}")
    } else {
        format!("*14\r\n{body}")
    }
}

const WRONGPASS: &str = "-WRONGPASS invalid username-password pair or user is disabled.\r\n";
const NOAUTH: &str = "-NOAUTH Authentication required.\r\n";
const HELLO_NOAUTH: &str = "-NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time\r\n";

#[test]
fn auth_with_requirepass() {
    let h = server(Some("secret"));
    let mut c = Conn::new(h.addr);
    assert_eq!(c.call_str(&["PING"]), NOAUTH);
    assert_eq!(c.call_str(&["CLIENT", "ID"]), NOAUTH);
    // Lookup and arity errors come before the auth check.
    assert_eq!(
        c.call_str(&["CLIENT", "SETNAME"]),
        "-ERR wrong number of arguments for 'client|setname' command\r\n"
    );
    assert_eq!(c.call_str(&["HELLO", "3"]), HELLO_NOAUTH);
    assert_eq!(c.call_str(&["AUTH", "wrong"]), WRONGPASS);
    assert_eq!(c.call_str(&["AUTH", "default", "wrong"]), WRONGPASS);
    assert_eq!(c.call_str(&["AUTH", "bob", "secret"]), WRONGPASS);
    assert_eq!(
        c.call_str(&["AUTH", "a", "b", "c"]),
        "-ERR syntax error\r\n"
    );
    assert_eq!(c.call_str(&["AUTH", "secret"]), "+OK\r\n");
    assert_eq!(c.call_str(&["PING"]), "+PONG\r\n");
    // A failed AUTH does not log an authenticated client out.
    assert_eq!(c.call_str(&["AUTH", "wrong"]), WRONGPASS);
    assert_eq!(c.call_str(&["PING"]), "+PONG\r\n");
    // RESET goes back to the unauthenticated state.
    assert_eq!(c.call_str(&["RESET"]), "+RESET\r\n");
    assert_eq!(c.call_str(&["PING"]), NOAUTH);
    assert_eq!(c.call_str(&["AUTH", "default", "secret"]), "+OK\r\n");
    assert_eq!(c.call_str(&["PING"]), "+PONG\r\n");
}

#[test]
fn hello_auth_and_setname_act_in_order() {
    let h = server(Some("secret"));
    let mut c = Conn::new(h.addr);
    // Redis 7.0 applies SETNAME before noticing the client is not authenticated.
    assert_eq!(
        c.call_str(&["HELLO", "3", "SETNAME", "early"]),
        HELLO_NOAUTH
    );
    assert_eq!(
        c.call_str(&["HELLO", "3", "AUTH", "default", "wrong"]),
        WRONGPASS
    );
    assert_eq!(
        c.call_str(&["HELLO", "3", "AUTH", "default", "secret", "SETNAME", "a b"]),
        "-ERR Client names cannot contain spaces, newlines or special characters.\r\n"
    );
    // ... but the AUTH before the bad name went through; still RESP2.
    assert_eq!(c.call_str(&["CLIENT", "GETNAME"]), "$5\r\nearly\r\n");
    let id = c.id();
    assert_eq!(
        c.call_str(&["HELLO", "3", "AUTH", "default", "secret", "SETNAME", "n"]),
        hello_reply(true, id)
    );
    assert_eq!(c.call_str(&["CLIENT", "GETNAME"]), "$1\r\nn\r\n");
    assert_eq!(
        c.call_str(&["HELLO", "3", "SETNAME", ""]),
        hello_reply(true, id)
    );
    assert_eq!(c.call_str(&["CLIENT", "GETNAME"]), "_\r\n");
}

#[test]
fn hello_switches_protocol() {
    let h = server(None);
    let mut c = Conn::ready(h.addr);
    let id = c.id();
    assert_eq!(c.call_str(&["HELLO"]), hello_reply(false, id));
    assert_eq!(c.call_str(&["HELLO", "3"]), hello_reply(true, id));
    assert_eq!(c.call_str(&["CLIENT", "GETNAME"]), "_\r\n");
    assert!(c.call_str(&["CLIENT", "INFO"]).starts_with("=")); // verbatim
    assert_eq!(c.call_str(&["HELLO"]), hello_reply(true, id));
    assert_eq!(c.call_str(&["HELLO", "2"]), hello_reply(false, id));
    assert_eq!(c.call_str(&["CLIENT", "GETNAME"]), "$-1\r\n");
    for (args, err) in [
        (
            &["HELLO", "1"][..],
            "-NOPROTO unsupported protocol version\r\n",
        ),
        (&["HELLO", "4"], "-NOPROTO unsupported protocol version\r\n"),
        (
            &["HELLO", "3.0"],
            "-ERR Protocol version is not an integer or out of range\r\n",
        ),
        (
            &["HELLO", "3", "AUTH", "x"],
            "-ERR Syntax error in HELLO option 'AUTH'\r\n",
        ),
        (
            &["HELLO", "3", "foo"],
            "-ERR Syntax error in HELLO option 'foo'\r\n",
        ),
        (&["HELLO", "3", "AUTH", "bob", "x"], WRONGPASS),
    ] {
        assert_eq!(c.call_str(args), err, "{args:?}");
    }
    // Nothing above switched the protocol.
    assert_eq!(c.call_str(&["CLIENT", "GETNAME"]), "$-1\r\n");
    // Without requirepass the default user takes any password.
    assert_eq!(
        c.call_str(&["HELLO", "2", "AUTH", "default", "anything"]),
        hello_reply(false, id)
    );
    assert_eq!(
        c.call_str(&["AUTH", "x"]),
        "-ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?\r\n"
    );
    assert_eq!(c.call_str(&["AUTH", "default", "x"]), "+OK\r\n");
}

#[test]
fn client_kill_forms() {
    let h = server(None);
    let mut a = Conn::ready(h.addr);
    let mut b = Conn::ready(h.addr);
    let mut c = Conn::ready(h.addr);
    let (ida, idb) = (a.id(), b.id());

    assert_eq!(
        a.call_str(&["CLIENT", "KILL", "1.2.3.4:5"]),
        "-ERR No such client\r\n"
    );
    assert_eq!(a.call_str(&["CLIENT", "KILL", "ID", "99999"]), ":0\r\n");
    assert_eq!(
        a.call_str(&["CLIENT", "KILL", "ID", "0"]),
        "-ERR client-id should be greater than 0\r\n"
    );
    assert_eq!(
        a.call_str(&["CLIENT", "KILL", "TYPE", "foo"]),
        "-ERR Unknown client type 'foo'\r\n"
    );
    assert_eq!(
        a.call_str(&["CLIENT", "KILL", "USER", "nobody"]),
        "-ERR No such user 'nobody'\r\n"
    );
    assert_eq!(
        a.call_str(&["CLIENT", "KILL", "ID", "5", "SKIPME"]),
        "-ERR syntax error\r\n"
    );
    // SKIPME defaults to yes in the filter form.
    assert_eq!(
        a.call_str(&["CLIENT", "KILL", "ID", &ida.to_string()]),
        ":0\r\n"
    );

    assert_eq!(
        a.call_str(&["CLIENT", "KILL", "ID", &idb.to_string()]),
        ":1\r\n"
    );
    assert!(b.closed());
    // Gone at once, like Redis's freeClient.
    assert_eq!(
        a.call_str(&["CLIENT", "LIST", "ID", &idb.to_string()]),
        "$0\r\n\r\n"
    );

    let caddr = c.s.local_addr().unwrap().to_string();
    assert_eq!(a.call_str(&["CLIENT", "KILL", &caddr]), "+OK\r\n");
    assert!(c.closed());

    // Killing yourself: the reply arrives, then the connection closes and
    // pipelined commands after it do not run.
    let aaddr = a.s.local_addr().unwrap().to_string();
    let mut req = enc(&["CLIENT", "KILL", "ADDR", &aaddr, "SKIPME", "no"]);
    req.extend_from_slice(&enc(&["SET", "after", "kill"]));
    a.s.write_all(&req).unwrap();
    assert_eq!(a.raw(), b":1\r\n");
    assert!(a.closed());
    let mut d = Conn::ready(h.addr);
    assert_eq!(d.call_str(&["EXISTS", "after"]), ":0\r\n");
}

#[test]
fn client_reply_modes() {
    let h = server(None);
    let mut c = Conn::ready(h.addr);
    // The same sequence Redis 7.0.15 was checked with; only some replies arrive.
    let seq: &[&[&str]] = &[
        &["CLIENT", "REPLY", "SKIP"],
        &["CLIENT", "REPLY", "ON"], // +OK: ON clears the skip first
        &["PING", "1"],
        &["CLIENT", "REPLY", "SKIP"],
        &["CLIENT", "REPLY", "SKIP"], // skipped, and skips the next
        &["PING", "2"],
        &["PING", "3"],
        &["CLIENT", "REPLY", "OFF"],
        &["PING", "4"],
        &["NOSUCH"],
        &["CLIENT", "REPLY", "SKIP"], // ignored while OFF
        &["RESET"],                   // +RESET: clears OFF first
        &["PING", "5"],
        &["CLIENT", "REPLY", "SKIP"],
        &["RESET"], // skipped: a skip already in force stays
        &["GET"],
        &["CLIENT", "REPLY", "FOO"],
    ];
    let mut req = Vec::new();
    for a in seq {
        req.extend_from_slice(&enc(a));
    }
    c.s.write_all(&req).unwrap();
    let mut got = Vec::new();
    for _ in 0..7 {
        got.push(String::from_utf8(c.raw()).unwrap());
    }
    assert_eq!(
        got,
        [
            "+OK\r\n",
            "$1\r\n1\r\n",
            "$1\r\n3\r\n",
            "+RESET\r\n",
            "$1\r\n5\r\n",
            "-ERR wrong number of arguments for 'get' command\r\n",
            "-ERR syntax error\r\n",
        ]
    );
    c.silent();
}

#[test]
fn reset_restores_connection_state() {
    let h = server(None);
    let mut c = Conn::ready(h.addr);
    let id = c.id();
    assert_eq!(c.call_str(&["SELECT", "3"]), "+OK\r\n");
    assert_eq!(c.call_str(&["CLIENT", "SETNAME", "worker"]), "+OK\r\n");
    // Redis 7.2: RESET keeps lib-name and lib-ver
    // (https://redis.io/docs/latest/commands/client-setinfo/).
    assert_eq!(
        c.call_str(&["CLIENT", "SETINFO", "LIB-NAME", "mylib"]),
        "+OK\r\n"
    );
    assert_eq!(c.call_str(&["HELLO", "3"]), hello_reply(true, id));
    assert_eq!(c.call_str(&["SET", "k", "v"]), "+OK\r\n");
    assert_eq!(c.call_str(&["RESET"]), "+RESET\r\n");
    assert_eq!(c.call_str(&["CLIENT", "GETNAME"]), "$-1\r\n");
    assert_eq!(c.call_str(&["GET", "k"]), "$-1\r\n");
    let info = c.call_str(&["CLIENT", "INFO"]);
    assert!(info.starts_with('$'), "{info}");
    assert!(info.contains(" name= "), "{info}");
    assert!(info.contains(" db=0 "), "{info}");
    assert!(
        info.ends_with(" resp=2 lib-name=mylib lib-ver= tpkeys=0 watchex=0\n\r\n"),
        "{info}"
    );
    assert_eq!(c.call_str(&["SELECT", "3"]), "+OK\r\n");
    assert_eq!(c.call_str(&["GET", "k"]), "$1\r\nv\r\n");
}

/// CLIENT SETINFO (Redis 7.2.0,
/// https://redis.io/docs/latest/commands/client-setinfo/): the attributes
/// show in CLIENT INFO and CLIENT LIST as `lib-name=` / `lib-ver=` right after
/// `resp=`, where Redis 7.2's CLIENT LIST puts them
/// (https://redis.io/docs/latest/commands/client-list/); "" clears one.
#[test]
fn client_setinfo_shown_in_client_info_and_list() {
    let h = server(None);
    let mut a = Conn::ready(h.addr);
    let mut b = Conn::ready(h.addr);
    let list = format!("{}", b.id());
    let info = b.call_str(&["CLIENT", "INFO"]);
    assert!(
        info.contains(" resp=2 lib-name= lib-ver= tpkeys="),
        "{info}"
    );
    let bad = "-ERR lib-ver cannot contain spaces, newlines or special characters.\r\n";
    // (attribute, value, the reply, then what b's CLIENT INFO and a's CLIENT
    // LIST ID b contain); a rejected value leaves the attribute as it was.
    let steps = [
        (
            "lib-name",
            "redis-py(x_v1.0)",
            "+OK\r\n",
            " resp=2 lib-name=redis-py(x_v1.0) lib-ver= tpkeys=",
        ),
        (
            "LIB-VER",
            "5.0.1",
            "+OK\r\n",
            " lib-name=redis-py(x_v1.0) lib-ver=5.0.1 ",
        ),
        (
            "lib-ver",
            "a b",
            bad,
            " lib-name=redis-py(x_v1.0) lib-ver=5.0.1 ",
        ),
        (
            "lib-name",
            "",
            "+OK\r\n",
            " resp=2 lib-name= lib-ver=5.0.1 tpkeys=",
        ),
    ];
    for (attr, value, reply, shown) in steps {
        let cmd = ["CLIENT", "SETINFO", attr, value];
        assert_eq!(b.call_str(&cmd), reply, "{cmd:?}");
        let info = b.call_str(&["CLIENT", "INFO"]);
        assert!(info.contains(shown), "{cmd:?}: {info}");
        let line = a.call_str(&["CLIENT", "LIST", "ID", &list]);
        assert!(line.contains(shown), "{cmd:?}: {line}");
    }
}

/// CLIENT NO-TOUCH (Redis 7.2,
/// https://redis.io/docs/latest/commands/client-no-touch/): with ON the
/// client's commands leave a key's LRU/LFU stamp alone, except TOUCH; the
/// `T` flag shows it in CLIENT LIST; OFF and RESET end it. Under
/// allkeys-lfu a new key's counter is 5 and its first access raises it to
/// 6 for certain (LFULogIncr's probability is 1 at the initial value).
#[test]
fn client_no_touch_leaves_access_stamps() {
    let h = server(None);
    let mut a = Conn::ready(h.addr);
    let mut other = Conn::ready(h.addr);
    let freq = |c: &mut Conn, k: &str| c.call_str(&["OBJECT", "FREQ", k]);
    let cfg = ["CONFIG", "SET", "maxmemory-policy", "allkeys-lfu"];
    assert_eq!(a.call_str(&cfg), "+OK\r\n");
    for k in ["k1", "k2", "k3", "k4"] {
        assert_eq!(a.call_str(&["SET", k, "v"]), "+OK\r\n");
        assert_eq!(freq(&mut a, k), ":5\r\n");
    }
    assert_eq!(a.call_str(&["CLIENT", "NO-TOUCH", "ON"]), "+OK\r\n");
    let id = a.id().to_string();
    let line = other.call_str(&["CLIENT", "LIST", "ID", &id]);
    assert!(line.contains(" flags=T "), "{line}");
    // Reads and writes leave the counter; so does a transaction's GET.
    assert_eq!(a.call_str(&["GET", "k1"]), "$1\r\nv\r\n");
    assert_eq!(a.call_str(&["APPEND", "k1", "x"]), ":2\r\n");
    assert_eq!(a.call_str(&["MULTI"]), "+OK\r\n");
    a.call_str(&["GET", "k1"]);
    a.call_str(&["TOUCH", "k2"]);
    assert_eq!(a.call_str(&["EXEC"]), "*2\r\n$2\r\nvx\r\n:1\r\n");
    assert_eq!(freq(&mut a, "k1"), ":5\r\n");
    // TOUCH still touches, alone or in the transaction.
    assert_eq!(freq(&mut a, "k2"), ":6\r\n");
    assert_eq!(a.call_str(&["TOUCH", "k3"]), ":1\r\n");
    assert_eq!(freq(&mut a, "k3"), ":6\r\n");
    // Another client's read does touch.
    other.call_str(&["GET", "k4"]);
    assert_eq!(freq(&mut a, "k4"), ":6\r\n");
    // OFF: reads touch again.
    assert_eq!(a.call_str(&["CLIENT", "NO-TOUCH", "off"]), "+OK\r\n");
    let line = other.call_str(&["CLIENT", "LIST", "ID", &id]);
    assert!(line.contains(" flags=N "), "{line}");
    a.call_str(&["GET", "k1"]);
    assert_eq!(freq(&mut a, "k1"), ":6\r\n");
    // RESET clears it (Redis 7.2's clearClientConnectionState).
    assert_eq!(a.call_str(&["CLIENT", "NO-TOUCH", "ON"]), "+OK\r\n");
    assert_eq!(a.call_str(&["RESET"]), "+RESET\r\n");
    assert!(a.call_str(&["CLIENT", "INFO"]).contains(" flags=N "));
    assert_eq!(a.call_str(&["SET", "k5", "v"]), "+OK\r\n");
    a.call_str(&["GET", "k5"]);
    assert_eq!(freq(&mut a, "k5"), ":6\r\n");
}

#[test]
fn client_list_fields_and_filters() {
    let h = server(None);
    let mut a = Conn::ready(h.addr);
    let mut b = Conn::ready(h.addr);
    let idb = b.id();
    b.call(&["CLIENT", "SETNAME", "bee"]);
    b.call(&["SELECT", "2"]);
    let line = a.call_str(&["CLIENT", "LIST", "ID", &idb.to_string()]);
    let body = line.split_once("\r\n").unwrap().1;
    let names: Vec<&str> = body
        .trim_end()
        .split(' ')
        .map(|f| f.split_once('=').unwrap().0)
        .collect();
    assert_eq!(
        names.join(" "),
        "id addr laddr fd name age idle flags db sub psub ssub multi qbuf qbuf-free argv-mem multi-mem rbs rbp obl oll omem tot-mem events cmd user redir resp lib-name lib-ver tpkeys watchex"
    );
    assert!(body.contains(" name=bee "), "{body}");
    assert!(body.contains(" db=2 "), "{body}");
    assert!(body.contains(" cmd=select "), "{body}");
    b.call(&["NOSUCHCMD"]);
    let line = a.call_str(&["CLIENT", "LIST", "ID", &idb.to_string()]);
    assert!(line.contains(" cmd=NULL "), "{line}");
    b.call(&["CLIENT", "ID"]);
    let line = a.call_str(&["CLIENT", "LIST", "ID", &idb.to_string()]);
    assert!(line.contains(" cmd=client|id "), "{line}");
    let mine = a.call_str(&["CLIENT", "INFO"]);
    assert!(mine.contains(" cmd=client|info "), "{mine}");
    assert!(mine.contains(" qbuf=26 "), "{mine}");
    assert!(mine.contains(" argv-mem=10 "), "{mine}");

    assert_eq!(
        a.call_str(&["CLIENT", "LIST", "TYPE", "foo"]),
        "-ERR Unknown client type 'foo'\r\n"
    );
    assert_eq!(
        a.call_str(&["CLIENT", "LIST", "ID", "1", "TYPE", "normal"]),
        "-ERR Invalid client ID\r\n"
    );
    assert_eq!(
        a.call_str(&["CLIENT", "LIST", "x"]),
        "-ERR syntax error\r\n"
    );
    assert_eq!(
        a.call_str(&["CLIENT", "LIST", "TYPE", "pubsub"]),
        "$0\r\n\r\n"
    );
    let all = a.call_str(&["CLIENT", "LIST", "TYPE", "NORMAL"]);
    assert_eq!(all.matches(" addr=").count(), 2, "{all}");
    assert_eq!(
        a.call_str(&["CLIENT", "SETNAME", "a b"]),
        "-ERR Client names cannot contain spaces, newlines or special characters.\r\n"
    );
    assert_eq!(
        a.call_str(&["CLIENT", "NO-EVICT", "maybe"]),
        "-ERR syntax error\r\n"
    );
    assert_eq!(a.call_str(&["CLIENT", "NO-EVICT", "on"]), "+OK\r\n");
    assert!(a.call_str(&["CLIENT", "INFO"]).contains(" flags=e "));
}

#[test]
fn select_and_echo_errors() {
    let h = server(None);
    let mut c = Conn::ready(h.addr);
    for (args, want) in [
        (&["SELECT", "16"][..], "-ERR DB index is out of range\r\n"),
        (&["SELECT", "-1"], "-ERR DB index is out of range\r\n"),
        (
            &["SELECT", "01"],
            "-ERR value is not an integer or out of range\r\n",
        ),
        (
            &["SELECT", "2147483648"],
            "-ERR value is out of range, value must between -2147483648 and 2147483647\r\n",
        ),
        (&["SELECT", "15"], "+OK\r\n"),
        (&["ECHO", ""], "$0\r\n\r\n"),
        (
            &["PING", "a", "b"],
            "-ERR wrong number of arguments for 'ping' command\r\n",
        ),
        (
            &["ECHO", "a", "b"],
            "-ERR wrong number of arguments for 'echo' command\r\n",
        ),
    ] {
        assert_eq!(c.call_str(args), want, "{args:?}");
    }
    assert_eq!(c.call_str(&["QUIT"]), "+OK\r\n");
    assert!(c.closed());
}

/// Sends raw bytes on a new connection; returns everything read until EOF
/// (with "<EOF>") or 1 s of silence (with "<open>"), long enough for a loaded machine.
fn raw_exchange(h: &ServerHandle, data: &[u8]) -> String {
    let mut c = Conn::new(h.addr);
    let _ = c.s.write_all(data);
    let (got, closed) = c.read_all(Duration::from_secs(1));
    String::from_utf8_lossy(&got).into_owned() + if closed { "<EOF>" } else { "<open>" }
}

/// Redis 7.0.15 holds a client that has not authenticated to 10 arguments
/// and 16 KB bulks; an AUTH earlier in the same read lifts the limits for
/// what follows it. Expected bytes taken from redis-server 7.0.15.
#[test]
fn unauthenticated_request_limits() {
    let h = server(Some("pw"));
    let args = |n: usize| {
        let mut v = format!("*{n}\r\n").into_bytes();
        for _ in 0..n {
            v.extend_from_slice(b"$1\r\na\r\n");
        }
        v
    };
    let big_echo = |n: usize| {
        let mut v = format!("*2\r\n$4\r\nECHO\r\n${n}\r\n").into_bytes();
        v.extend(std::iter::repeat_n(b'x', n));
        v.extend_from_slice(b"\r\n");
        v
    };
    let auth = |pw: &str| format!("*2\r\n$4\r\nAUTH\r\n${}\r\n{pw}\r\n", pw.len()).into_bytes();
    assert_eq!(
        raw_exchange(&h, &args(11)),
        "-ERR Protocol error: unauthenticated multibulk length\r\n<EOF>"
    );
    // The count alone is enough.
    assert_eq!(
        raw_exchange(&h, b"*11\r\n"),
        "-ERR Protocol error: unauthenticated multibulk length\r\n<EOF>"
    );
    assert!(raw_exchange(&h, &args(10)).starts_with("-ERR unknown command 'a'"));
    assert_eq!(
        raw_exchange(&h, b"*2\r\n$4\r\nECHO\r\n$16385\r\n"),
        "-ERR Protocol error: unauthenticated bulk length\r\n<EOF>"
    );
    assert_eq!(
        raw_exchange(&h, &big_echo(16384)),
        "-NOAUTH Authentication required.\r\n<open>"
    );
    let mut after_auth = auth("pw");
    after_auth.extend(big_echo(16385));
    let got = raw_exchange(&h, &after_auth);
    assert!(got.starts_with("+OK\r\n$16385\r\nxxx"), "{got:.40}");
    assert!(got.ends_with("x\r\n<open>"));
    let mut after_auth = auth("pw");
    after_auth.extend(args(11));
    assert!(raw_exchange(&h, &after_auth).starts_with("+OK\r\n-ERR unknown command 'a'"));
    let mut wrong = auth("xx");
    wrong.extend(args(11));
    assert_eq!(
        raw_exchange(&h, &wrong),
        "-WRONGPASS invalid username-password pair or user is disabled.\r\n\
         -ERR Protocol error: unauthenticated multibulk length\r\n<EOF>"
    );
    // Inline requests are not limited.
    let mut inline = b"PING".to_vec();
    for _ in 0..20 {
        inline.extend_from_slice(b" a");
    }
    inline.extend_from_slice(b"\r\n");
    assert_eq!(
        raw_exchange(&h, &inline),
        "-NOAUTH Authentication required.\r\n<open>"
    );
    // Without requirepass nothing is limited.
    let open = server(None);
    assert!(raw_exchange(&open, &args(11)).starts_with("-ERR unknown command 'a'"));
}

/// 50,000 ECHOs of 1,000 bytes written before any reply is read (50 MB
/// each way): Redis reads on while the replies wait; a server that stops
/// reading until its replies are taken leaves both sides waiting forever.
#[test]
fn a_long_pipeline_sent_before_reading_is_answered() {
    let h = server(None);
    let mut c = Conn::new(h.addr);
    c.s.set_write_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    c.s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    pipeline_before_reading(&mut c.s, 50_000);
    // Every reply counted once in INFO, though written across many reads.
    let info = c.call_str(&["INFO", "stats"]);
    let out: u64 = info
        .lines()
        .find_map(|l| l.strip_prefix("total_net_output_bytes:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("total_net_output_bytes");
    assert_eq!(out, 50_000 * 1009, "{info}");
}
