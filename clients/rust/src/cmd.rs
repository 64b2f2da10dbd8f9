//! Building commands: `cmd("HSET").arg("h").arg("f").arg(1)`.
//!
//! Owns the argument list and its RESP encoding. Must not touch the
//! connection: sending is `Client::query`'s, converting the reply is
//! `super::value`'s.

use bytes::{BufMut, Bytes, BytesMut};

use super::error::Result;
use super::value::FromValue;
use super::Client;

/// Something usable as one command argument (sent as a bulk string).
pub trait ToArg {
    /// The argument's bytes.
    fn to_arg(&self) -> Bytes;
}

impl<T: ToArg + ?Sized> ToArg for &T {
    fn to_arg(&self) -> Bytes {
        (**self).to_arg()
    }
}

impl ToArg for str {
    fn to_arg(&self) -> Bytes {
        Bytes::copy_from_slice(self.as_bytes())
    }
}

impl ToArg for String {
    fn to_arg(&self) -> Bytes {
        Bytes::copy_from_slice(self.as_bytes())
    }
}

impl ToArg for [u8] {
    fn to_arg(&self) -> Bytes {
        Bytes::copy_from_slice(self)
    }
}

impl<const N: usize> ToArg for [u8; N] {
    fn to_arg(&self) -> Bytes {
        Bytes::copy_from_slice(self)
    }
}

impl ToArg for Vec<u8> {
    fn to_arg(&self) -> Bytes {
        Bytes::copy_from_slice(self)
    }
}

impl ToArg for Bytes {
    fn to_arg(&self) -> Bytes {
        self.clone()
    }
}

macro_rules! int_arg {
    ($($t:ty),*) => {$(
        impl ToArg for $t {
            fn to_arg(&self) -> Bytes {
                Bytes::from(self.to_string())
            }
        }
    )*};
}
int_arg!(i8, i16, i32, i64, u8, u16, u32, u64, usize, isize, f32, f64);

/// A command: its name and arguments. Build with [`cmd`].
#[derive(Clone, Debug, PartialEq)]
pub struct Cmd {
    args: Vec<Bytes>,
}

/// Starts a command: `cmd("HSET").arg("h").arg("f").arg(1)`.
///
/// ```no_run
/// # async fn demo() -> latchkey::Result<()> {
/// use latchkey::{cmd, Client};
/// let client = Client::connect("redis://127.0.0.1:6379").await?;
/// let n: i64 = cmd("HSET").arg("h").arg("f").arg(1).query(&client).await?;
/// let v: Option<String> = client.query(&cmd("GET").arg("k")).await?;
/// # let _ = (n, v); Ok(()) }
/// ```
pub fn cmd(name: &str) -> Cmd {
    Cmd {
        args: vec![name.to_arg()],
    }
}

impl Cmd {
    /// Appends one argument.
    pub fn arg(mut self, a: impl ToArg) -> Cmd {
        self.args.push(a.to_arg());
        self
    }

    /// Appends one argument in place.
    pub fn push_arg(&mut self, a: impl ToArg) -> &mut Cmd {
        self.args.push(a.to_arg());
        self
    }

    /// The command name and arguments.
    pub fn args(&self) -> &[Bytes] {
        &self.args
    }

    /// Sends the command on `client` and converts the reply.
    pub async fn query<T: FromValue>(&self, client: &Client) -> Result<T> {
        client.query(self).await
    }

    /// The RESP encoding: an array of bulk strings.
    pub(crate) fn encode(&self, out: &mut BytesMut) {
        let len: usize = self.args.iter().map(|a| a.len() + 16).sum();
        out.reserve(len + 16);
        put_len(out, b'*', self.args.len());
        for a in &self.args {
            put_len(out, b'$', a.len());
            out.put_slice(a);
            out.put_slice(b"\r\n");
        }
    }
}

fn put_len(out: &mut BytesMut, prefix: u8, n: usize) {
    out.put_u8(prefix);
    out.put_slice(itoa::Buffer::new().format(n).as_bytes());
    out.put_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes() {
        let mut b = BytesMut::new();
        cmd("SET").arg("k").arg(12).arg(b"v").encode(&mut b);
        assert_eq!(
            &b[..],
            b"*4\r\n$3\r\nSET\r\n$1\r\nk\r\n$2\r\n12\r\n$1\r\nv\r\n"
        );
    }
}
