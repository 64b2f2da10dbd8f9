//! `SETTP key value QUEUE`: connections waiting, first come first served,
//! for a taken key, in the blocking registry's line for that key
//! (`crate::blocking`). When the key goes away the server creates it at once
//! for the first waiter still connected (bound to that connection, as SETTP
//! would) and pushes `settp key ACQUIRED value` to it: a lock hand-off that
//! costs no round trip and wakes no one else.
//!
//! Frames only: must not touch the keyspace, the registry or connections;
//! `Keyspace::hand_over_lock` (`ops`) does the hand-over, the `Outbox`
//! delivers.

/// Encodes the hand-off push `settp key ACQUIRED value token`.
pub fn acquired_frame(resp3: bool, key: &[u8], value: &[u8], token: u64) -> Vec<u8> {
    let t = itoa::Buffer::new().format(token).as_bytes().to_vec();
    super::push_of(resp3, &[b"settp", key, b"ACQUIRED", value, &t])
}

/// Encodes the notice to a holder whose key went by another hand:
/// `settp key LOST reason` (the event: del, expired, evicted, flush, ...).
pub fn lost_frame(resp3: bool, key: &[u8], reason: &str) -> Vec<u8> {
    super::push_of(resp3, &[b"settp", key, b"LOST", reason.as_bytes()])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_bytes() {
        assert_eq!(
            acquired_frame(true, b"lk", b"t1", 17),
            b">5\r\n$5\r\nsettp\r\n$2\r\nlk\r\n$8\r\nACQUIRED\r\n$2\r\nt1\r\n$2\r\n17\r\n"
        );
        assert_eq!(&acquired_frame(false, b"lk", b"", 1)[..4], b"*5\r\n");
        assert_eq!(
            lost_frame(false, b"lk", "del"),
            b"*4\r\n$5\r\nsettp\r\n$2\r\nlk\r\n$4\r\nLOST\r\n$3\r\ndel\r\n"
        );
    }
}
