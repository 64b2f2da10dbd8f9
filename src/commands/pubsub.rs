//! Pub/sub commands (Redis 7.0's pubsub.c): SUBSCRIBE, UNSUBSCRIBE,
//! PSUBSCRIBE, PUNSUBSCRIBE, SSUBSCRIBE, SUNSUBSCRIBE, PUBLISH, SPUBLISH and
//! PUBSUB. The registry is `crate::pubsub`; what a RESP2 connection may run
//! while subscribed is decided in the dispatcher's `check`.
//!
//! Reaches the registry and the client table only through `Ctx`. Must not
//! deliver messages itself: `Store::publish` and the registry do.

use bytes::Bytes;

use super::*;
use super::{Pushes, SUBSCRIBED_OK};
use crate::pubsub::Kind;

const PUBSUB_SLOW: &[&str] = &["pubsub", "slow"];
const PUBSUB_FAST: &[&str] = &["pubsub", "fast"];
const SUB_FLAGS: u32 = PUBSUB | NOSCRIPT | LOADING | STALE;
const PUB_FLAGS: u32 = PUBSUB | LOADING | STALE | FAST | MAY_REPLICATE;
const INFO_FLAGS: u32 = PUBSUB | LOADING | STALE;

pub static COMMANDS: &[Spec] = &[
    spec(
        "subscribe",
        -2,
        SUB_FLAGS,
        (0, 0, 0),
        "pubsub",
        "2.0.0",
        "Listen for messages published to the given channels",
        PUBSUB_SLOW,
        subscribe,
    )
    .rules(SUBSCRIBED_OK),
    spec(
        "unsubscribe",
        -1,
        SUB_FLAGS,
        (0, 0, 0),
        "pubsub",
        "2.0.0",
        "Stop listening for messages posted to the given channels",
        PUBSUB_SLOW,
        unsubscribe,
    )
    .rules(SUBSCRIBED_OK),
    spec(
        "psubscribe",
        -2,
        SUB_FLAGS,
        (0, 0, 0),
        "pubsub",
        "2.0.0",
        "Listen for messages published to channels matching the given patterns",
        PUBSUB_SLOW,
        psubscribe,
    )
    .rules(SUBSCRIBED_OK),
    spec(
        "punsubscribe",
        -1,
        SUB_FLAGS,
        (0, 0, 0),
        "pubsub",
        "2.0.0",
        "Stop listening for messages posted to channels matching the given patterns",
        PUBSUB_SLOW,
        punsubscribe,
    )
    .rules(SUBSCRIBED_OK),
    spec(
        "ssubscribe",
        -2,
        SUB_FLAGS,
        (1, -1, 1),
        "pubsub",
        "7.0.0",
        "Listen for messages published to the given shard channels",
        PUBSUB_SLOW,
        ssubscribe,
    )
    .rules(SUBSCRIBED_OK),
    spec(
        "sunsubscribe",
        -1,
        SUB_FLAGS,
        (1, -1, 1),
        "pubsub",
        "7.0.0",
        "Stop listening for messages posted to the given shard channels",
        PUBSUB_SLOW,
        sunsubscribe,
    )
    .rules(SUBSCRIBED_OK),
    spec(
        "publish",
        3,
        PUB_FLAGS,
        (0, 0, 0),
        "pubsub",
        "2.0.0",
        "Post a message to a channel",
        PUBSUB_FAST,
        publish,
    )
    .pushes(Pushes::First),
    spec(
        "spublish",
        3,
        PUB_FLAGS,
        (1, 1, 1),
        "pubsub",
        "7.0.0",
        "Post a message to a shard channel",
        PUBSUB_FAST,
        spublish,
    )
    .pushes(Pushes::First),
    Spec {
        subs: PUBSUB_SUBS,
        ..spec(
            "pubsub",
            -2,
            0,
            (0, 0, 0),
            "pubsub",
            "2.8.0",
            "A container for Pub/Sub commands",
            &["slow"],
            pubsub,
        )
    },
];

static PUBSUB_SUBS: &[Spec] = &[
    spec(
        "channels",
        -2,
        INFO_FLAGS,
        (0, 0, 0),
        "pubsub",
        "2.8.0",
        "List active channels",
        PUBSUB_SLOW,
        channels,
    ),
    spec(
        "numpat",
        2,
        INFO_FLAGS,
        (0, 0, 0),
        "pubsub",
        "2.8.0",
        "Get the count of unique patterns pattern subscriptions",
        PUBSUB_SLOW,
        numpat,
    ),
    spec(
        "numsub",
        -2,
        INFO_FLAGS,
        (0, 0, 0),
        "pubsub",
        "2.8.0",
        "Get the count of subscribers for channels",
        PUBSUB_SLOW,
        numsub,
    ),
    spec(
        "shardchannels",
        -2,
        INFO_FLAGS,
        (0, 0, 0),
        "pubsub",
        "7.0.0",
        "List active shard channels",
        PUBSUB_SLOW,
        shardchannels,
    ),
    spec(
        "shardnumsub",
        -2,
        INFO_FLAGS,
        (0, 0, 0),
        "pubsub",
        "7.0.0",
        "Get the count of subscribers for shard channels",
        PUBSUB_SLOW,
        shardnumsub,
    ),
    spec(
        "help",
        2,
        LOADING | STALE,
        (0, 0, 0),
        "pubsub",
        "6.2.0",
        "Show helpful text about the different subcommands",
        &["slow"],
        help,
    ),
];

/// Redis's error for a command refused in subscribed mode; `name` is the
/// command's full name (`client|list`).
pub fn subscribed_error(name: &str) -> String {
    format!(
        "ERR Can't execute '{name}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context"
    )
}

/// The count a confirmation carries: channels and patterns together, or
/// shard channels alone (Redis's clientSubscriptionsCount and
/// clientShardSubscriptionsCount).
fn count(ctx: &Ctx, kind: Kind) -> usize {
    let (c, p, s) = ctx.store.pubsub.counts(ctx.conn.id);
    match kind {
        Kind::Shard => s,
        _ => c + p,
    }
}

/// One (un)subscribe confirmation: an array in RESP2, a push in RESP3;
/// a nil name when an unsubscribe-all found nothing. Sent even under
/// CLIENT REPLY OFF or SKIP (Redis writes it with CLIENT_PUSHING).
fn confirm(ctx: &mut Ctx, what: &str, name: Option<&[u8]>, n: usize) {
    ctx.conn.reply_pushed = true;
    ctx.out.push(3);
    ctx.out.bulk(what.as_bytes());
    match name {
        Some(name) => ctx.out.bulk(name),
        None => ctx.out.null(),
    }
    ctx.out.int(n as i64);
}

/// Copies the registry's counts into CLIENT LIST's figures.
fn sync_info(ctx: &mut Ctx) {
    let (c, p, s) = ctx.store.pubsub.counts(ctx.conn.id);
    if let Some(h) = ctx.store.clients.get_mut(&ctx.conn.id) {
        h.info.sub = c;
        h.info.psub = p;
        h.info.ssub = s;
    }
}

fn subscribe_to(ctx: &mut Ctx, args: &[Bytes], kind: Kind) {
    for name in &args[1..] {
        // Arguments are slices of the whole read buffer: keep a copy.
        let name = Bytes::copy_from_slice(name);
        ctx.store.pubsub.subscribe(ctx.conn.id, kind, &name);
        let n = count(ctx, kind);
        confirm(ctx, kind.names().0, Some(&name), n);
    }
    sync_info(ctx);
}

fn unsubscribe_from(ctx: &mut Ctx, args: &[Bytes], kind: Kind) {
    let what = kind.names().1;
    if args.len() == 1 {
        let names = ctx.store.pubsub.names_of(ctx.conn.id, kind);
        if names.is_empty() {
            let n = count(ctx, kind);
            confirm(ctx, what, None, n);
        }
        for name in names {
            ctx.store.pubsub.unsubscribe(ctx.conn.id, kind, &name);
            let n = count(ctx, kind);
            confirm(ctx, what, Some(&name), n);
        }
    } else {
        for name in &args[1..] {
            ctx.store.pubsub.unsubscribe(ctx.conn.id, kind, name);
            let n = count(ctx, kind);
            confirm(ctx, what, Some(name), n);
        }
    }
    sync_info(ctx);
}

fn subscribe(ctx: &mut Ctx, args: &[Bytes]) {
    subscribe_to(ctx, args, Kind::Channel);
}

fn psubscribe(ctx: &mut Ctx, args: &[Bytes]) {
    subscribe_to(ctx, args, Kind::Pattern);
}

fn ssubscribe(ctx: &mut Ctx, args: &[Bytes]) {
    subscribe_to(ctx, args, Kind::Shard);
}

fn unsubscribe(ctx: &mut Ctx, args: &[Bytes]) {
    unsubscribe_from(ctx, args, Kind::Channel);
}

fn punsubscribe(ctx: &mut Ctx, args: &[Bytes]) {
    unsubscribe_from(ctx, args, Kind::Pattern);
}

fn sunsubscribe(ctx: &mut Ctx, args: &[Bytes]) {
    unsubscribe_from(ctx, args, Kind::Shard);
}

fn publish(ctx: &mut Ctx, args: &[Bytes]) {
    publish_and_replicate(ctx, args, false);
}

fn spublish(ctx: &mut Ctx, args: &[Bytes]) {
    publish_and_replicate(ctx, args, true);
}

/// Delivers the message here and, as Redis outside cluster mode
/// (forceCommandPropagation with PROPAGATE_REPL), to the replicas'
/// subscribers: the command goes to the replication stream, not the AOF.
fn publish_and_replicate(ctx: &mut Ctx, args: &[Bytes], shard: bool) {
    let n = ctx
        .store
        .publish(Some(ctx.conn.id), shard, &args[1], &args[2]);
    let db = ctx.conn.db;
    ctx.store.ks.effects.replicated(db, args);
    ctx.out.int(n as i64);
}

fn pubsub(ctx: &mut Ctx, args: &[Bytes]) {
    if let Some(sub) = resolve(ctx.out, args) {
        (sub.run)(ctx, args);
    }
}

/// CHANNELS / SHARDCHANNELS [pattern].
fn list_channels(ctx: &mut Ctx, args: &[Bytes], shard: bool) {
    if args.len() > 3 {
        let sub = String::from_utf8_lossy(&args[1]).into_owned();
        return ctx.error(&format!(
            "ERR unknown subcommand or wrong number of arguments for '{sub}'. Try PUBSUB HELP."
        ));
    }
    let names = ctx.store.pubsub.active(shard, args.get(2).map(|p| &p[..]));
    ctx.out.array(names.len());
    for n in names {
        ctx.out.bulk(&n);
    }
}

fn channels(ctx: &mut Ctx, args: &[Bytes]) {
    list_channels(ctx, args, false);
}

fn shardchannels(ctx: &mut Ctx, args: &[Bytes]) {
    list_channels(ctx, args, true);
}

fn count_subscribers(ctx: &mut Ctx, args: &[Bytes], shard: bool) {
    ctx.out.array((args.len() - 2) * 2);
    for ch in &args[2..] {
        let n = ctx.store.pubsub.numsub(shard, ch);
        ctx.out.bulk(ch);
        ctx.out.int(n as i64);
    }
}

fn numsub(ctx: &mut Ctx, args: &[Bytes]) {
    count_subscribers(ctx, args, false);
}

fn shardnumsub(ctx: &mut Ctx, args: &[Bytes]) {
    count_subscribers(ctx, args, true);
}

fn numpat(ctx: &mut Ctx, _args: &[Bytes]) {
    let n = ctx.store.pubsub.numpat();
    ctx.out.int(n as i64);
}

fn help(ctx: &mut Ctx, _args: &[Bytes]) {
    server::reply_help(
        ctx,
        "PUBSUB",
        &[
            "CHANNELS [<pattern>]",
            "    Return the currently active channels matching a <pattern> (default: '*').",
            "NUMPAT",
            "    Return number of subscriptions to patterns.",
            "NUMSUB [<channel> ...]",
            "    Return the number of subscribers for the specified channels, excluding",
            "    pattern subscriptions(default: no channels).",
            "SHARDCHANNELS [<pattern>]",
            "    Return the currently active shard level channels matching a <pattern> (default: '*').",
            "SHARDNUMSUB [<shardchannel> ...]",
            "    Return the number of subscribers for the specified shard level channel(s)",
        ],
    );
}
