//! The relay: accepting connections, forwarding bytes both ways, and the faults on the way.

use super::*;

pub(super) async fn accept(listener: TcpListener, shared: Arc<Shared>) {
    loop {
        let Ok((client, _)) = listener.accept().await else { continue };
        let n = shared.counters.connections.fetch_add(1, Ordering::Relaxed) + 1;
        let plan = shared.script.plan(n);
        tokio::spawn(relay(n, client, plan, shared.clone()));
    }
}

/// Finds the client's application-data TLS records in the byte stream, across chunks.
#[derive(Debug, Default)]
struct Records {
    /// Header bytes of the record being read (a header can span chunks).
    header: [u8; 5],
    have: usize,
    /// Body bytes of the current record still to come.
    body_left: usize,
    /// Application-data records begun so far.
    seen: u64,
}

impl Records {
    /// Account for `chunk`; when the application-data record numbered `stop_at` begins in it,
    /// return the offset of its header's first byte in `chunk` (0 when the header began in an
    /// earlier chunk) and count nothing from there on.
    fn feed(&mut self, chunk: &[u8], stop_at: Option<u64>) -> Option<usize> {
        let mut i = 0;
        while i < chunk.len() {
            if self.body_left > 0 {
                let skip = self.body_left.min(chunk.len() - i);
                self.body_left -= skip;
                i += skip;
                continue;
            }
            let header_start = i.saturating_sub(self.have);
            self.header[self.have] = chunk[i];
            self.have += 1;
            i += 1;
            if self.have == 5 {
                self.have = 0;
                self.body_left = usize::from(u16::from_be_bytes([self.header[3], self.header[4]]));
                if self.header[0] == 23 {
                    if stop_at == Some(self.seen + 1) {
                        return Some(header_start);
                    }
                    self.seen += 1;
                }
            }
        }
        None
    }
}

/// Relay one connection under `plan`.
async fn relay(conn: u64, mut client: TcpStream, plan: Plan, shared: Arc<Shared>) {
    if let Some(DownCut { at: 0, then: Some(cut), .. }) = plan.down {
        shared.fired(conn, &format!("{} at connect", cut_word(cut)));
        end(client, None, cut).await;
        return;
    }
    let Ok(mut server) = TcpStream::connect(shared.upstream).await else { return };
    // Latency only: a socket that refuses the option still relays.
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let outcome = pump(conn, &mut client, &mut server, plan, &shared).await;
    if let Some(cut) = outcome {
        end(client, Some(server), cut).await;
    }
}

/// Forward both ways until both peers closed (`None`) or a fault ends the connection.
async fn pump(conn: u64, client: &mut TcpStream, server: &mut TcpStream, plan: Plan, shared: &Shared) -> Option<Cut> {
    let (mut client_rx, mut client_tx) = client.split();
    let (mut server_rx, mut server_tx) = server.split();
    let (mut up_buf, mut down_buf) = (vec![0u8; 16 * 1024], vec![0u8; 16 * 1024]);
    let (mut up_open, mut down_open) = (true, true);
    let (mut down, mut records) = (0u64, Records::default());
    let mut down_cut = plan.down;
    if !plan.latency.is_zero() {
        shared.fired(conn, &format!("latency {:?} per chunk", plan.latency));
    }
    while up_open || down_open {
        tokio::select! {
            read = client_rx.read(&mut up_buf), if up_open => {
                let n = read.unwrap_or(0);
                if n == 0 {
                    up_open = false;
                    // Half-close of a peer that may be gone: the relay ends either way.
                    let _ = server_tx.shutdown().await;
                    continue;
                }
                let chunk = &up_buf[..n];
                let before = records.seen;
                let stop = records.feed(chunk, plan.record.map(|(r, _)| r));
                shared.counters.client_records.fetch_add(records.seen - before, Ordering::Relaxed);
                let forward = stop.map_or(chunk, |at| &chunk[..at]);
                if !send(&mut server_tx, forward, plan.latency).await {
                    return Some(Cut::Reset);
                }
                shared.counters.bytes_up.fetch_add(forward.len() as u64, Ordering::Relaxed);
                if let (Some(_), Some((record, cut))) = (stop, plan.record) {
                    shared.fired(conn, &format!("{} at client record {record}", cut_word(cut)));
                    return Some(cut);
                }
            }
            read = server_rx.read(&mut down_buf), if down_open => {
                let n = read.unwrap_or(0);
                if n == 0 {
                    down_open = false;
                    // Half-close of a peer that may be gone: the relay ends either way.
                    let _ = client_tx.shutdown().await;
                    continue;
                }
                let mut chunk = &down_buf[..n];
                if let Some(cut) = down_cut.filter(|c| down + n as u64 >= c.at) {
                    down_cut = None;
                    let head = usize::try_from(cut.at - down).unwrap_or(n);
                    if !send(&mut client_tx, &chunk[..head], plan.latency).await {
                        return Some(Cut::Reset);
                    }
                    down += head as u64;
                    shared.counters.bytes_down.fetch_add(head as u64, Ordering::Relaxed);
                    chunk = &chunk[head..];
                    let what = match cut.then {
                        Some(end) if cut.stall.is_zero() => format!("{} after {down} bytes", cut_word(end)),
                        Some(end) => format!("stall {:?} after {down} bytes, then {}", cut.stall, cut_word(end)),
                        None => format!("stall {:?} after {down} bytes, then continue", cut.stall),
                    };
                    shared.fired(conn, &what);
                    tokio::time::sleep(cut.stall).await;
                    if let Some(end) = cut.then {
                        return Some(end);
                    }
                }
                if !send(&mut client_tx, chunk, plan.latency).await {
                    return Some(Cut::Reset);
                }
                down += chunk.len() as u64;
                shared.counters.bytes_down.fetch_add(chunk.len() as u64, Ordering::Relaxed);
            }
        }
    }
    None
}

/// Write `bytes` after `delay`; false when the peer is gone.
async fn send(to: &mut (impl AsyncWrite + Unpin), bytes: &[u8], delay: Duration) -> bool {
    if bytes.is_empty() {
        return true;
    }
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    to.write_all(bytes).await.is_ok()
}

/// End a connection towards both peers.
async fn end(mut client: TcpStream, server: Option<TcpStream>, cut: Cut) {
    match cut {
        Cut::Reset => {
            // The fault played: a peer already gone needs no reset, and closing it is the rest of the cut.
            let _ = client.set_zero_linger();
            if let Some(s) = &server {
                let _ = s.set_zero_linger();
            }
        }
        Cut::Close => {
            // Closing peers that may be gone already: the cut is what the test observes.
            let _ = client.shutdown().await;
            if let Some(mut s) = server {
                let _ = s.shutdown().await;
                drain(s).await;
            }
            drain(client).await;
        }
    }
}

/// After a FIN, read (and discard) what a peer still sends until it closes too, briefly, so the
/// close stays orderly (closing a socket with unread data would send a reset instead).
async fn drain(mut stream: impl AsyncRead + Unpin) {
    let mut buf = [0u8; 4096];
    // Draining is bounded: what is unread after 2 s is dropped on purpose.
    let _ = tokio::time::timeout(Duration::from_secs(2), async {
        while stream.read(&mut buf).await.is_ok_and(|n| n > 0) {}
    })
    .await;
}

fn cut_word(cut: Cut) -> &'static str {
    match cut {
        Cut::Close => "close",
        Cut::Reset => "reset",
    }
}

#[test]
fn records_are_found_across_chunk_boundaries() {
    // A handshake record (type 22), then three application-data records (type 23).
    let record = |kind: u8, len: u16| {
        let mut r = vec![kind, 3, 3];
        r.extend(len.to_be_bytes());
        r.extend(std::iter::repeat_n(0xAA, usize::from(len)));
        r
    };
    let stream: Vec<u8> = [record(22, 7), record(23, 3), record(23, 10), record(23, 1)].concat();
    // Fed one byte at a time, the third application-data record begins at byte 12 + 8 + 15.
    let mut r = Records::default();
    let mut found = None;
    for (i, b) in stream.iter().enumerate() {
        if r.feed(std::slice::from_ref(b), Some(3)).is_some() {
            found = Some(i);
            break;
        }
    }
    assert_eq!(found, Some(12 + 8 + 15 + 4), "the header is complete at its 5th byte");
    assert_eq!(r.seen, 2);
    // Fed at once, the offset is the header's first byte.
    let mut r = Records::default();
    assert_eq!(r.feed(&stream, Some(3)), Some(12 + 8 + 15));
    let mut r = Records::default();
    assert_eq!(r.feed(&stream, None), None);
    assert_eq!(r.seen, 3);
}
