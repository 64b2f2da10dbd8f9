//! Client-side caching across connections: redirection of invalidations,
//! a broken redirection, the tracking table's limit, INFO's totals.

mod common;
use common::*;

fn id_of(c: &mut Conn) -> String {
    let r = c.call_str(&["CLIENT", "ID"]);
    r.trim_start_matches(':').trim_end().to_string()
}

#[test]
fn invalidations_redirected_to_a_resp3_client() {
    let h = start();
    let mut sink = Conn::resp3(h.addr);
    let sink_id = id_of(&mut sink);
    let mut reader = Conn::new(h.addr);
    assert_eq!(
        reader.call_str(&["CLIENT", "TRACKING", "on", "REDIRECT", &sink_id]),
        "+OK\r\n"
    );
    assert_eq!(
        reader.call_str(&["CLIENT", "GETREDIR"]),
        format!(":{sink_id}\r\n")
    );
    reader.call(&["GET", "k"]);
    let mut writer = Conn::new(h.addr);
    writer.call(&["SET", "k", "1"]);
    assert_eq!(
        sink.raw_str(),
        ">2\r\n$10\r\ninvalidate\r\n*1\r\n$1\r\nk\r\n"
    );
    // A RESP2 reader without redirection is sent nothing.
    let mut plain = Conn::new(h.addr);
    plain.call(&["CLIENT", "TRACKING", "on"]);
    plain.call(&["GET", "p"]);
    writer.call(&["SET", "p", "1"]);
    assert_eq!(plain.call_str(&["PING"]), "+PONG\r\n");
}

#[test]
fn a_broken_redirection_is_reported() {
    let h = start();
    let mut sink = Conn::new(h.addr);
    let sink_id = id_of(&mut sink);
    let mut reader = Conn::resp3(h.addr);
    reader.call(&["CLIENT", "TRACKING", "on", "REDIRECT", &sink_id]);
    reader.call(&["GET", "k"]);
    drop(sink);
    let mut writer = Conn::new(h.addr);
    eventually("the redirection client is gone", || {
        writer.call_str(&["CLIENT", "LIST"]).matches("id=").count() == 2
    });
    writer.call(&["SET", "k", "1"]);
    assert_eq!(
        reader.raw_str(),
        format!(">2\r\n$21\r\ntracking-redir-broken\r\n:{sink_id}\r\n")
    );
    let info = reader.call_str(&["CLIENT", "TRACKINGINFO"]);
    assert!(info.contains("broken_redirect"), "{info}");
}

#[test]
fn the_table_limit_invalidates_early_and_info_counts() {
    let h = start();
    let mut c = Conn::resp3(h.addr);
    c.call(&["CONFIG", "SET", "tracking-table-max-keys", "2"]);
    c.call(&["CLIENT", "TRACKING", "on"]);
    c.call(&["MGET", "a", "b"]);
    let info = c.call_str(&["INFO", "stats"]);
    assert!(info.contains("tracking_total_keys:2\r\n"), "{info}");
    assert!(info.contains("tracking_total_items:2\r\n"), "{info}");
    // A third key pushes one of the others out: its reader is told.
    c.send(&["GET", "c"]);
    assert_eq!(c.frame(), V::Nil);
    let V::Push(items) = c.frame() else {
        panic!("an invalidation push")
    };
    assert_eq!(items[0], b("invalidate"));
    let info = c.call_str(&["INFO", "stats"]);
    assert!(info.contains("tracking_total_keys:2\r\n"), "{info}");
}

#[test]
fn tracking_shows_in_client_list() {
    let h = start();
    let mut c = Conn::new(h.addr);
    let info = c.call_str(&["CLIENT", "INFO"]);
    assert!(
        info.contains(" flags=N ") && info.contains(" redir=-1 "),
        "{info}"
    );
    c.call(&["CLIENT", "TRACKING", "on"]);
    let info = c.call_str(&["CLIENT", "INFO"]);
    assert!(
        info.contains(" flags=t ") && info.contains(" redir=0 "),
        "{info}"
    );
    c.call(&["CLIENT", "TRACKING", "off"]);
    c.call(&["CLIENT", "TRACKING", "on", "BCAST"]);
    let info = c.call_str(&["CLIENT", "INFO"]);
    assert!(info.contains(" flags=tB "), "{info}");
}
