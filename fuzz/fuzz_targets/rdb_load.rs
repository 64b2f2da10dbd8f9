//! Fuzzes the RDB loader and the RESTORE payload reader: any bytes give a
//! value or an error, never a panic, an endless loop or an allocation
//! sized by an untrusted length. Inputs starting with "REDIS" go to the
//! file loader twice: as they are, and with the checksum zeroed (checks
//! off) so that corrupted content is parsed to its end.

#![no_main]

use latchkey_server::rdb::file;
use latchkey_server::rdb::payload;
use latchkey_server::rdb::value::Limits;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let lim = Limits::redis_defaults();
    let _ = payload::restore(data, &lim);
    let _ = file::load(data, &lim, 0, 16);
    if data.len() > 17 && data.starts_with(b"REDIS") {
        let mut unchecked = data.to_vec();
        let n = unchecked.len();
        unchecked[n - 8..].fill(0);
        let _ = file::load(&unchecked, &lim, 0, 16);
    }
});
