//! The web page of `tchseq serve` in real headless Chromium, driven through the DevTools
//! protocol over `--remote-debugging-pipe` (no driver, no websocket): type a sentence, wait,
//! check the translation, the n-best list and the heatmap on a phone-width screen.

use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::{FromRawFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::serve::Server;
use crate::util::{repo, tchseq};

struct Browser {
    child: Child,
    to: File,
    from: BufReader<File>,
    next_id: u64,
    _profile: tempfile::TempDir,
}

fn chromium() -> PathBuf {
    if let Ok(p) = std::env::var("TCHSEQ_CHROMIUM") {
        return PathBuf::from(p);
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    for name in ["chromium", "chromium-browser", "google-chrome"] {
        if let Some(p) = std::env::split_paths(&path).map(|d| d.join(name)).find(|p| p.is_file()) {
            return p;
        }
    }
    panic!("the browser test needs Chromium: `make test` installs Debian's `chromium` with apt, or set TCHSEQ_CHROMIUM=/path/to/chrome");
}

fn pipe() -> (RawFd, RawFd) {
    let mut fds = [0; 2];
    // SAFETY: a plain pipe2 call into a two-element array
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0, "pipe2");
    (fds[0], fds[1])
}

impl Browser {
    fn start() -> Browser {
        let profile = tempfile::tempdir().unwrap();
        let (child_reads, we_write) = pipe();
        let (we_read, child_writes) = pipe();
        let mut cmd = Command::new(chromium());
        cmd.args(["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run", "--remote-debugging-pipe"])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("about:blank")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        // SAFETY: only async-signal-safe fcntl/dup2 calls between fork and exec. The ends are first
        // moved above 4, so that neither dup2 clobbers the other (or is a no-op that keeps CLOEXEC).
        unsafe {
            cmd.pre_exec(move || {
                let (r, w) = (libc::fcntl(child_reads, libc::F_DUPFD, 10), libc::fcntl(child_writes, libc::F_DUPFD, 10));
                if r < 0 || w < 0 || libc::dup2(r, 3) < 0 || libc::dup2(w, 4) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn().expect("starting chromium");
        // SAFETY: the child has its copies; these ends are ours alone
        unsafe {
            libc::close(child_reads);
            libc::close(child_writes);
        }
        let (to, from) = unsafe { (File::from_raw_fd(we_write), File::from_raw_fd(we_read)) };
        Browser { child, to, from: BufReader::new(from), next_id: 0, _profile: profile }
    }

    /// One DevTools command; events in between are skipped.
    fn call(&mut self, method: &str, params: Value, session: Option<&str>) -> Value {
        self.next_id += 1;
        let mut msg = json!({ "id": self.next_id, "method": method, "params": params });
        if let Some(s) = session {
            msg["sessionId"] = json!(s);
        }
        let mut bytes = msg.to_string().into_bytes();
        bytes.push(0);
        self.to.write_all(&bytes).expect("writing to chromium");
        loop {
            let mut buf = Vec::new();
            let n = self.from.read_until(0, &mut buf).expect("reading from chromium");
            assert!(n > 0, "chromium closed the DevTools pipe");
            buf.pop();
            let reply: Value = serde_json::from_slice(&buf).expect("DevTools JSON");
            if reply["id"] == json!(self.next_id) {
                if let Some(e) = reply.get("error") {
                    panic!("{method}: {e}");
                }
                return reply["result"].clone();
            }
        }
    }

    fn eval(&mut self, session: &str, expression: &str) -> Value {
        let r = self.call("Runtime.evaluate", json!({ "expression": expression, "returnByValue": true, "awaitPromise": true }), Some(session));
        if let Some(e) = r.get("exceptionDetails") {
            panic!("{expression}: {e}");
        }
        r["result"]["value"].clone()
    }

    fn wait_for(&mut self, session: &str, expression: &str, what: &str) {
        let start = Instant::now();
        while self.eval(session, expression) != json!(true) {
            let state = self.eval(session, "document.getElementById('status') && document.getElementById('status').textContent");
            assert!(start.elapsed() < Duration::from_secs(90), "waited 90 s for {what}; status line: {state}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn base64_decode(text: &str) -> Vec<u8> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => panic!("not base64: {c}"),
    };
    let clean: Vec<u8> = text.bytes().filter(|&c| c != b'=' && !c.is_ascii_whitespace()).collect();
    let mut out = Vec::with_capacity(clean.len() * 3 / 4);
    for chunk in clean.chunks(4) {
        let n = chunk.iter().enumerate().fold(0u32, |acc, (i, &c)| acc | (u32::from(value(c)) << (18 - 6 * i)));
        out.extend_from_slice(&n.to_be_bytes()[1..chunk.len()]);
    }
    out
}

#[test]
fn the_web_page_translates_as_you_type_and_draws_the_heatmap() {
    let sentence = "Two dogs are playing in the snow.";
    let out = tchseq().args(["translate", "-m"]).arg(repo("weights/multi30k.en-de")).arg(sentence).output().unwrap();
    let expected = String::from_utf8(out.stdout).unwrap().trim().to_string();
    assert!(!expected.is_empty());

    let m2m = format!("m2m={}", repo("tests/fixtures/multilingual/m2m").display());
    let server = Server::start(&["--model", &m2m]);
    let mut b = Browser::start();
    let target = b.call("Target.createTarget", json!({ "url": "about:blank" }), None)["targetId"].clone();
    let session = b.call("Target.attachToTarget", json!({ "targetId": target, "flatten": true }), None)["sessionId"]
        .as_str()
        .expect("a session")
        .to_string();
    let s = session.as_str();
    // a phone-width screen
    b.call("Emulation.setDeviceMetricsOverride", json!({ "width": 390, "height": 844, "deviceScaleFactor": 1, "mobile": true }), Some(s));
    b.call("Page.enable", json!({}), Some(s));
    b.call("Page.navigate", json!({ "url": format!("http://127.0.0.1:{}/", server.port) }), Some(s));
    b.wait_for(s, "!!document.getElementById('source') && document.querySelectorAll('select option').length > 0", "the model list");

    b.eval(s, "document.getElementById('source').focus()");
    b.call("Input.insertText", json!({ "text": sentence }), Some(s));
    b.wait_for(s, "document.body.dataset.state === 'done'", "the translation");
    assert_eq!(b.eval(s, "document.getElementById('target').value"), json!(expected));
    // the streamed greedy preview's tokens arrived while it decoded
    b.wait_for(s, "Number(document.body.dataset.partials || 0) > 0", "the streamed preview's tokens");
    let nbest = b.eval(s, "document.getElementById('nbest').textContent");
    assert!(nbest.as_str().unwrap().contains(&expected), "n-best list: {nbest}");
    assert!(nbest.as_str().unwrap().contains("-0."), "scores in the n-best list: {nbest}");

    b.wait_for(s, "document.getElementById('heatmap').dataset.state === 'ready'", "the heatmap");
    let svg = b.eval(s, "document.querySelector('#heatmap svg') ? document.querySelector('#heatmap svg').outerHTML : ''");
    let svg = svg.as_str().unwrap();
    assert!(svg.contains("Hunde") && svg.contains("dogs"), "the heatmap labels both sides");
    assert_eq!(b.eval(s, "document.documentElement.scrollWidth <= window.innerWidth"), json!(true), "no horizontal scrolling at 390 px");

    let height = b.eval(s, "document.documentElement.scrollHeight");
    let clip = json!({ "x": 0, "y": 0, "width": 390, "height": height, "scale": 1 });
    let shot = b.call("Page.captureScreenshot", json!({ "format": "png", "clip": clip, "captureBeyondViewport": true }), Some(s));
    let png = base64_decode(shot["data"].as_str().unwrap());
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    // kept only where TCHSEQ_SCREENSHOT asks (docs/serve.png); else in a temporary directory
    let scratch = tempfile::tempdir().unwrap();
    let path = std::env::var_os("TCHSEQ_SCREENSHOT").map_or_else(|| scratch.path().join("serve.png"), PathBuf::from);
    std::fs::write(&path, png).unwrap();

    // a multilingual model served whole: one entry per pair; fr → en gives the CLI's translation
    let french = "Deux chiens jouent dans la neige.";
    let out = tchseq().args(["translate", "-m"]).arg(repo("tests/fixtures/multilingual/m2m")).args(["-s", "fr", "-t", "en", french]).output().unwrap();
    let expected = String::from_utf8(out.stdout).unwrap().trim().to_string();
    assert!(!expected.is_empty());
    let pick = "const sel = document.getElementById('model'); \
                const o = [...sel.options].find((o) => o.textContent === 'm2m (fr → en)'); \
                if (o) { sel.value = o.value; sel.dispatchEvent(new Event('change')); } !!o";
    assert_eq!(b.eval(s, pick), json!(true), "the page lists m2m (fr → en)");
    b.eval(s, &format!("document.getElementById('source').value = {}; translate()", json!(french)));
    b.wait_for(s, &format!("document.getElementById('target').value === {}", json!(expected)), "the fr → en translation");
    b.wait_for(s, "document.getElementById('heatmap').dataset.state === 'ready'", "the fr → en heatmap");
}
