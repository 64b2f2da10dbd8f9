//! Connection commands (PING, ECHO, HELLO, AUTH, SELECT, QUIT, RESET, CLIENT).

use bytes::Bytes;

use super::*;

const CONN_FAST: &[&str] = &["fast", "connection"];

pub static COMMANDS: &[Spec] = &[
    spec(
        "ping",
        -1,
        FAST,
        (0, 0, 0),
        "connection",
        "1.0.0",
        "Returns the server's liveliness response.",
        CONN_FAST,
        ping,
    ),
    spec(
        "quit",
        -1,
        ALLOW_BUSY | NO_AUTH | FAST,
        (0, 0, 0),
        "connection",
        "1.0.0",
        "Closes the connection.",
        CONN_FAST,
        quit,
    ),
];

fn ping(ctx: &mut Ctx, args: &[Bytes]) {
    match args.len() {
        1 => ctx.out.simple("PONG"),
        2 => ctx.out.bulk(&args[1]),
        _ => ctx.error("ERR wrong number of arguments for 'ping' command"),
    }
}

fn quit(ctx: &mut Ctx, _args: &[Bytes]) {
    ctx.out.ok();
    ctx.conn.close_after_reply = true;
}
