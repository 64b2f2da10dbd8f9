//! What the examples share: the server's URL from the command line, and
//! their connections to it.
//!
//! Example code: the client crate's public API only (`latchkey::Client`),
//! never the server's crate.

/// `--url URL` (or `--url=URL`), else `$LATCHKEY_URL`, else redis://127.0.0.1:6379.
pub fn url() -> String {
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        if a == "--url" {
            if let Some(u) = args.next() {
                return u;
            }
        } else if let Some(u) = a.strip_prefix("--url=") {
            return u.to_string();
        }
    }
    std::env::var("LATCHKEY_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

/// `n` connections to the server at [`url`].
pub async fn connect_all(n: usize) -> latchkey::Result<Vec<latchkey::Client>> {
    let url = url();
    let mut clients = Vec::with_capacity(n);
    for _ in 0..n {
        clients.push(latchkey::Client::connect(&url).await?);
    }
    Ok(clients)
}
