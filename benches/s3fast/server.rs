//! A fast S3-compatible read server over a local directory, for storage benchmarks.
//!
//!     rustc -O --edition 2021 benches/s3fast/server.rs -o bench-data/tools/s3fast
//!     s3fast --root DIR [--port 0] [--delay-ms 0]
//!
//! The same protocol and control endpoints as `benches/s3_local.py` (GET with `Range` and
//! `If-Match`, HEAD, ListObjectsV2, HEAD bucket; `GET /__stats`, `/__reset`,
//! `/__delay?s=0.02`), but with the server's own cost out of the way: native code, one
//! thread per connection, keep-alive, bodies sent with `sendfile(2)` (no copy through
//! user space), no hashing (the ETag is size and mtime, as `s3_local.py`). moto copies
//! the whole object per ranged GET and closes every connection, and a Python server
//! costs a core's share per request, so either caps what a client can show on the same
//! machine. Standard library only, so it builds with `rustc` alone in a second.
//!
//! Latency: each request waits `delay` before its response's first byte (the sleeping
//! thread holds only its own connection), as S3's first-byte latency does (Durner et
//! al., VLDB 2023). Prints `PORT <n>` when listening. Authentication is not checked.

use std::collections::BTreeSet;
use std::fs::{self, File};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, UNIX_EPOCH};

extern "C" {
    fn sendfile(out_fd: i32, in_fd: i32, offset: *mut i64, count: usize) -> isize;
}

static GET: AtomicU64 = AtomicU64::new(0);
static HEAD: AtomicU64 = AtomicU64::new(0);
static LIST: AtomicU64 = AtomicU64::new(0);
static OTHER: AtomicU64 = AtomicU64::new(0);
static BYTES: AtomicU64 = AtomicU64::new(0);
static CONNS: AtomicU64 = AtomicU64::new(0);
static DELAY_US: AtomicU64 = AtomicU64::new(0);

fn pct_decode(s: &str, plus_space: bool) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' if i + 2 < b.len() => {
                match std::str::from_utf8(&b[i + 1..i + 3]).ok().and_then(|h| u8::from_str_radix(h, 16).ok()).ok_or(())
                {
                    Ok(v) => {
                        out.push(v);
                        i += 3;
                        continue;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            b'+' if plus_space => out.push(b' '),
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// (year, month, day) of a day count since 1970-01-01 (Howard Hinnant's civil_from_days).
fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

fn http_date(secs: i64) -> String {
    const WD: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MO: [&str; 12] = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
    let (days, s) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, d) = civil(days);
    let wd = WD[days.rem_euclid(7) as usize];
    format!("{wd}, {d:02} {} {y} {:02}:{:02}:{:02} GMT", MO[m as usize - 1], s / 3600, s / 60 % 60, s % 60)
}

fn iso_date(secs: i64) -> String {
    let (days, s) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, d) = civil(days);
    format!("{y}-{m:02}-{d:02}T{:02}:{:02}:{:02}.000Z", s / 3600, s / 60 % 60, s % 60)
}

struct Meta {
    size: u64,
    secs: i64,
    etag: String,
}

fn meta(p: &Path) -> Option<Meta> {
    let m = fs::metadata(p).ok()?;
    if !m.is_file() {
        return None;
    }
    let t = m.modified().ok()?.duration_since(UNIX_EPOCH).ok()?;
    Some(Meta { size: m.len(), secs: t.as_secs() as i64, etag: format!("\"{:x}-{:x}\"", m.len(), t.as_nanos()) })
}

struct Resp {
    status: u16,
    headers: Vec<(&'static str, String)>,
    body: Vec<u8>,
    file: Option<(File, u64, u64)>,
}

fn error(status: u16, code: &str, msg: &str) -> Resp {
    let body =
        format!("<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>{code}</Code><Message>{msg}</Message></Error>");
    Resp { status, headers: vec![("Content-Type", "application/xml".into())], body: body.into_bytes(), file: None }
}

fn walk(dir: &Path, rel: &str, out: &mut Vec<String>) {
    let Ok(rd) = fs::read_dir(dir) else { return };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let key = if rel.is_empty() { name.clone() } else { format!("{rel}/{name}") };
        let p = e.path();
        if p.is_dir() {
            walk(&p, &key, out);
        } else {
            out.push(key);
        }
    }
}

fn list(root: &Path, bucket: &str, q: &[(String, String)]) -> Resp {
    let get = |k: &str| q.iter().find(|(a, _)| a == k).map(|(_, v)| v.as_str());
    let base = root.join(bucket);
    if !base.is_dir() {
        return error(404, "NoSuchBucket", "The specified bucket does not exist");
    }
    let prefix = get("prefix").unwrap_or("");
    let delimiter = get("delimiter").unwrap_or("");
    let start_after = get("continuation-token").or(get("start-after")).unwrap_or("");
    let max_keys: usize = get("max-keys").and_then(|v| v.parse().ok()).unwrap_or(1000);
    let mut keys = Vec::new();
    walk(&base, "", &mut keys);
    keys.retain(|k| k.starts_with(prefix));
    keys.sort();
    let (mut contents, mut prefixes) = (String::new(), Vec::new());
    let mut seen = BTreeSet::new();
    let (mut n, mut truncated, mut next, mut last) = (0usize, false, String::new(), start_after.to_string());
    for k in &keys {
        if k.as_str() <= start_after {
            continue;
        }
        if n >= max_keys {
            truncated = true;
            next = last.clone();
            break;
        }
        let rest = &k[prefix.len()..];
        if !delimiter.is_empty() && rest.contains(delimiter) {
            let p = format!("{prefix}{}{delimiter}", rest.split(delimiter).next().unwrap_or(""));
            if seen.insert(p.clone()) {
                prefixes.push(p);
                n += 1;
            }
            last = k.clone();
            continue;
        }
        if let Some(m) = meta(&base.join(k)) {
            contents.push_str(&format!(
                "<Contents><Key>{}</Key><LastModified>{}</LastModified><ETag>{}</ETag><Size>{}</Size><StorageClass>STANDARD</StorageClass></Contents>",
                xml_escape(k), iso_date(m.secs), xml_escape(&m.etag), m.size
            ));
            n += 1;
        }
        last = k.clone();
    }
    let mut body = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?><ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Name>{}</Name><Prefix>{}</Prefix><KeyCount>{n}</KeyCount><MaxKeys>{max_keys}</MaxKeys><IsTruncated>{truncated}</IsTruncated>",
        xml_escape(bucket), xml_escape(prefix)
    );
    if truncated {
        body.push_str(&format!("<NextContinuationToken>{}</NextContinuationToken>", xml_escape(&next)));
    }
    body.push_str(&contents);
    for p in prefixes {
        body.push_str(&format!("<CommonPrefixes><Prefix>{}</Prefix></CommonPrefixes>", xml_escape(&p)));
    }
    body.push_str("</ListBucketResult>");
    Resp { status: 200, headers: vec![("Content-Type", "application/xml".into())], body: body.into_bytes(), file: None }
}

fn object(root: &Path, method: &str, bucket: &str, key: &str, h: &[(String, String)]) -> Resp {
    let hdr = |k: &str| h.iter().find(|(a, _)| a == k).map(|(_, v)| v.as_str());
    let p = root.join(bucket).join(key);
    let Some(m) = meta(&p) else {
        OTHER.fetch_add(1, Relaxed);
        return error(404, "NoSuchKey", "The specified key does not exist");
    };
    if let Some(im) = hdr("if-match") {
        if im != m.etag && im != "*" {
            OTHER.fetch_add(1, Relaxed);
            return error(412, "PreconditionFailed", "If-Match failed");
        }
    }
    let mut headers = vec![
        ("ETag", m.etag.clone()),
        ("Last-Modified", http_date(m.secs)),
        ("Accept-Ranges", "bytes".into()),
        ("Content-Type", "application/octet-stream".into()),
    ];
    if method == "HEAD" {
        HEAD.fetch_add(1, Relaxed);
        headers.push(("Content-Length", m.size.to_string()));
        return Resp { status: 200, headers, body: Vec::new(), file: None };
    }
    GET.fetch_add(1, Relaxed);
    let (mut status, mut start, mut end) = (200u16, 0u64, m.size);
    if let Some(r) = hdr("range").and_then(|r| r.strip_prefix("bytes=")) {
        let (a, b) = r.split_once('-').unwrap_or((r, ""));
        if a.is_empty() {
            start = m.size.saturating_sub(b.parse().unwrap_or(0));
        } else {
            start = a.parse().unwrap_or(0);
            end = if b.is_empty() { m.size } else { m.size.min(b.parse::<u64>().unwrap_or(m.size) + 1) };
        }
        if start >= m.size && m.size > 0 {
            return error(416, "InvalidRange", "range not satisfiable");
        }
        status = 206;
        headers.push(("Content-Range", format!("bytes {start}-{}/{}", end - 1, m.size)));
    }
    match File::open(&p) {
        Ok(f) => Resp { status, headers, body: Vec::new(), file: Some((f, start, end - start)) },
        Err(_) => error(404, "NoSuchKey", "The specified key does not exist"),
    }
}

fn send_file(sock: &TcpStream, f: &File, start: u64, count: u64) -> std::io::Result<()> {
    let mut off = start as i64;
    let mut left = count as usize;
    while left > 0 {
        // SAFETY: both descriptors are open for the call; `off` is a valid pointer.
        let n = unsafe { sendfile(sock.as_raw_fd(), f.as_raw_fd(), &mut off, left.min(1 << 30)) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        left -= n as usize;
    }
    BYTES.fetch_add(count, Relaxed);
    Ok(())
}

fn serve(root: PathBuf, sock: TcpStream) -> std::io::Result<()> {
    sock.set_nodelay(true)?;
    let mut rd = BufReader::with_capacity(16 << 10, sock.try_clone()?);
    let mut w = &sock;
    loop {
        let mut line = String::new();
        if rd.read_line(&mut line)? == 0 {
            return Ok(());
        }
        let line = line.trim_end().to_string();
        if line.is_empty() {
            continue;
        }
        let mut parts = line.split(' ');
        let (method, target) = (parts.next().unwrap_or("").to_string(), parts.next().unwrap_or("/").to_string());
        let mut headers = Vec::new();
        loop {
            let mut l = String::new();
            if rd.read_line(&mut l)? == 0 {
                return Ok(());
            }
            let l = l.trim_end();
            if l.is_empty() {
                break;
            }
            if let Some((k, v)) = l.split_once(':') {
                headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
            }
        }
        let hdr = |k: &str| headers.iter().find(|(a, _)| a == k).map(|(_, v)| v.clone());
        let n: u64 = hdr("content-length").and_then(|v| v.parse().ok()).unwrap_or(0);
        if n > 0 {
            std::io::copy(&mut (&mut rd).take(n), &mut std::io::sink())?;
        }
        let close = hdr("connection").is_some_and(|v| v.eq_ignore_ascii_case("close"));
        let (path, query) = target.split_once('?').unwrap_or((&target, ""));
        let path = pct_decode(path, false);
        let q: Vec<(String, String)> = query
            .split('&')
            .filter(|s| !s.is_empty())
            .map(|kv| {
                let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
                (pct_decode(k, true), pct_decode(v, true))
            })
            .collect();
        let resp = match path.as_str() {
            "/__stats" => {
                let body =
                    format!(
                    "{{\"get\": {}, \"head\": {}, \"list\": {}, \"other\": {}, \"bytes\": {}, \"connections\": {}}}",
                    GET.load(Relaxed), HEAD.load(Relaxed), LIST.load(Relaxed), OTHER.load(Relaxed), BYTES.load(Relaxed),
                    CONNS.load(Relaxed)
                );
                Resp { status: 200, headers: vec![], body: body.into_bytes(), file: None }
            }
            "/__reset" => {
                for c in [&GET, &HEAD, &LIST, &OTHER, &BYTES, &CONNS] {
                    c.store(0, Relaxed);
                }
                Resp { status: 200, headers: vec![], body: Vec::new(), file: None }
            }
            "/__delay" => {
                let s: f64 = q.iter().find(|(k, _)| k == "s").and_then(|(_, v)| v.parse().ok()).unwrap_or(0.0);
                DELAY_US.store((s * 1e6) as u64, Relaxed);
                Resp { status: 200, headers: vec![], body: Vec::new(), file: None }
            }
            _ => {
                let d = DELAY_US.load(Relaxed);
                if d > 0 {
                    std::thread::sleep(Duration::from_micros(d));
                }
                let (bucket, key) =
                    path.trim_start_matches('/').split_once('/').unwrap_or((path.trim_start_matches('/'), ""));
                if key.is_empty() && method == "GET" && q.iter().any(|(k, _)| k == "list-type") {
                    LIST.fetch_add(1, Relaxed);
                    list(&root, bucket, &q)
                } else if key.is_empty() {
                    OTHER.fetch_add(1, Relaxed);
                    if root.join(bucket).is_dir() {
                        Resp { status: 200, headers: vec![], body: Vec::new(), file: None }
                    } else {
                        error(404, "NoSuchBucket", "no bucket")
                    }
                } else {
                    object(&root, &method, bucket, key, &headers)
                }
            }
        };
        let reason = match resp.status {
            200 => "OK",
            206 => "Partial Content",
            404 => "Not Found",
            412 => "Precondition Failed",
            416 => "Range Not Satisfiable",
            _ => "X",
        };
        let len = resp.file.as_ref().map_or(resp.body.len() as u64, |f| f.2);
        let mut head = format!("HTTP/1.1 {} {reason}\r\n", resp.status);
        for (k, v) in &resp.headers {
            if *k != "Content-Length" {
                head.push_str(&format!("{k}: {v}\r\n"));
            }
        }
        head.push_str(&format!(
            "Content-Length: {}\r\n\r\n",
            if method == "HEAD" && resp.file.is_none() {
                resp.headers.iter().find(|(k, _)| *k == "Content-Length").map_or(len.to_string(), |(_, v)| v.clone())
            } else {
                len.to_string()
            }
        ));
        if method == "HEAD" {
            w.write_all(head.as_bytes())?;
        } else if let Some((f, start, count)) = &resp.file {
            w.write_all(head.as_bytes())?;
            send_file(&sock, f, *start, *count)?;
        } else {
            head.push_str(std::str::from_utf8(&resp.body).unwrap_or(""));
            w.write_all(head.as_bytes())?;
        }
        if close {
            return Ok(());
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str| args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).cloned();
    let root = PathBuf::from(arg("--root").expect("--root DIR"));
    let port = arg("--port").unwrap_or_else(|| "0".into());
    let delay_ms: f64 = arg("--delay-ms").and_then(|v| v.parse().ok()).unwrap_or(0.0);
    DELAY_US.store((delay_ms * 1e3) as u64, Relaxed);
    let listener = TcpListener::bind(format!("127.0.0.1:{port}")).expect("bind");
    println!("PORT {}", listener.local_addr().expect("addr").port());
    let _ = std::io::stdout().flush();
    for sock in listener.incoming().flatten() {
        CONNS.fetch_add(1, Relaxed);
        let root = root.clone();
        let _ = std::thread::Builder::new().stack_size(256 << 10).spawn(move || {
            let _ = serve(root, sock);
        });
    }
}
