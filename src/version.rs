//! The Redis version latchkey emulates, as HELLO, INFO, LOLWUT, Lua's
//! `redis.REDIS_VERSION` and the RDB's `redis-ver` aux field report it. A
//! leaf: it imports nothing, so every layer may use it.
//!
//! Must not touch anything: two constants, no state and no code.

/// The Redis version we emulate.
pub const REDIS_VERSION: &str = "7.0.15";

/// [`REDIS_VERSION`] as a number, 0x00MMmmpp (Lua's `redis.REDIS_VERSION_NUM`).
pub const REDIS_VERSION_NUM: u32 = 0x0007_000f;

#[cfg(test)]
mod tests {
    #[test]
    fn the_number_is_the_version() {
        let parts: Vec<u32> = super::REDIS_VERSION
            .split('.')
            .map(|p| p.parse().unwrap())
            .collect();
        assert_eq!(
            super::REDIS_VERSION_NUM,
            parts[0] << 16 | parts[1] << 8 | parts[2]
        );
    }
}
