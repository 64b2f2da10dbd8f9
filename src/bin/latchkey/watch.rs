//! `latchkey watch KEY...`: one line per state or change, until interrupted.
//!
//! Must not touch locks or processes: the client's watch streams in, lines
//! on stdout out.

use std::io::Write;
use std::time::Duration;

use futures::stream::{self, StreamExt};
use latchkey::{Backoff, Error, Options, WatchEvent};
use tokio::signal::unix::{signal, SignalKind};

use crate::code;
use crate::units::now_rfc3339;

pub async fn run(server: &crate::Server, keys: Vec<String>, reconnect: bool) -> i32 {
    let (mut int, mut term) = match (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) {
        (Ok(i), Ok(t)) => (i, t),
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("latchkey: cannot install signal handlers: {e}");
            return code::ERROR;
        }
    };
    let opts = Options {
        client_name: Some(crate::CLIENT_NAME.to_string()),
        heartbeat: Some(crate::HEARTBEAT),
        reconnect: reconnect.then(|| Backoff {
            initial: Duration::from_millis(100),
            max: Duration::from_secs(5),
            max_attempts: None,
        }),
        ..Options::default()
    };
    let watching = async {
        let client = server
            .connect(opts)
            .await
            .map_err(|e| (format!("cannot connect to {}: {e}", server.url), e))?;
        let mut streams = Vec::with_capacity(keys.len());
        for (i, key) in keys.iter().enumerate() {
            let s = client
                .watch_stream(key)
                .await
                .map_err(|e| (format!("cannot watch {key:?}: {e}"), e))?;
            streams.push(s.map(move |ev| (i, ev)));
        }
        Ok::<_, (String, Error)>((client, stream::select_all(streams)))
    };
    let (_client, mut events) = tokio::select! {
        r = watching => match r {
            Ok(v) => v,
            Err((msg, e)) => {
                eprintln!("latchkey: {msg}");
                return crate::exit_for_error(&e);
            }
        },
        _ = int.recv() => return 0,
        _ = term.recv() => return 0,
    };

    let mut out = std::io::stdout().lock();
    loop {
        let (i, ev) = tokio::select! {
            ev = events.next() => match ev {
                Some(v) => v,
                None => {
                    eprintln!("latchkey: the connection to the server was lost");
                    return code::CONNECTION;
                }
            },
            _ = int.recv() => return 0,
            _ = term.recv() => return 0,
        };
        let word = match ev {
            WatchEvent::Exists => "EXIST",
            WatchEvent::NotExists => "NOEXIST",
            WatchEvent::Added => "ADD",
            WatchEvent::Deleted => "DEL",
            WatchEvent::Disconnected => "DISCONNECTED",
        };
        let now = now_rfc3339();
        let lost = ev == WatchEvent::Disconnected && !reconnect;
        // Without reconnecting this is the end for every key: say so for each.
        let shown: Vec<usize> = if lost {
            (0..keys.len()).collect()
        } else {
            vec![i]
        };
        for k in shown {
            // A closed stdout (`| head -1`) ends the watch quietly.
            if writeln!(out, "{now} {} {word}", keys[k]).is_err() || out.flush().is_err() {
                return 0;
            }
        }
        if lost {
            eprintln!("latchkey: the connection to the server was lost");
            return code::CONNECTION;
        }
    }
}
