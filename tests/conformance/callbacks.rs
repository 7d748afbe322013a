//! Callbacks: the last registered runs first (innermost layer first) at stage, shared and
//! local completion; each transforms the previous result; local callbacks run in the issuer;
//! a callback's error reaches the caller as an IoError with the callback's own words.
//! Guards against: callbacks run in the order they were added instead of innermost first, or
//! skipped at stage, shared or local completion; a callback's result dropped instead of handed to
//! the next; local callbacks run on the completing thread (a worker, a reaper) instead of the
//! issuer; and a callback's error reported without the words of its `report`.

use crate::support::*;
use dbaio::{Aio, HandleCallbacks, IoBuf, IoContext, IoMethodKind, IoResult, OpenOptions, Status};
use std::sync::{Arc, Mutex};

struct Layer {
    name: &'static str,
    log: Arc<Mutex<Vec<String>>>,
}

impl HandleCallbacks for Layer {
    fn name(&self) -> &'static str {
        self.name
    }
    fn stage(&self, _io: &IoContext<'_>, data: u8) {
        self.log
            .lock()
            .unwrap()
            .push(format!("stage {} {data}", self.name));
    }
    fn complete_shared(&self, io: &IoContext<'_>, prior: IoResult, data: u8) -> IoResult {
        self.log.lock().unwrap().push(format!(
            "shared {} {data} saw {}",
            self.name,
            prior.status.name()
        ));
        // The inner layer ("md") checks the bytes; the outer ("buf") fails on a magic byte.
        if self.name == "buf" && io.with_buffers(|b| b[0][0]) == 0xEE {
            return IoResult {
                status: Status::Error,
                callback_id: 2,
                error_data: 7,
                result: 0,
            };
        }
        if self.name == "md" {
            return IoResult {
                status: Status::Warning,
                ..prior
            };
        }
        prior
    }
    fn complete_local(&self, _io: &IoContext<'_>, prior: IoResult, _data: u8) -> IoResult {
        let t = std::thread::current().name().unwrap_or("?").to_string();
        self.log
            .lock()
            .unwrap()
            .push(format!("local {} on {t}", self.name));
        prior
    }
    fn report(&self, r: &IoResult) -> String {
        format!("invalid page (code {})", r.error_data)
    }
}

fn scenario(m: IoMethodKind) {
    let d = dir();
    let path = data_file(&d, "f", 65536);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[8192] = 0xEE;
    std::fs::write(&path, &bytes).unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    let mut b = Aio::builder(settings(m));
    let md = b
        .callback(Layer {
            name: "md",
            log: Arc::clone(&log),
        })
        .unwrap();
    let buf = b
        .callback(Layer {
            name: "buf",
            log: Arc::clone(&log),
        })
        .unwrap();
    let aio = b.start().unwrap();
    let log2 = Arc::clone(&log);
    std::thread::Builder::new()
        .name("owner".into())
        .spawn(move || {
            let me = aio.register_issuer("cb").unwrap();
            let f = aio.open(&path, &OpenOptions::read()).unwrap();
            let mut h = me.acquire().unwrap();
            h.add_callback(buf, 1).unwrap().add_callback(md, 2).unwrap();
            let c = me.wait(h.read(&f, 0, IoBuf::new(4096)));
            assert_eq!(
                c.result().status,
                Status::Warning,
                "md turned OK into WARNING; buf kept it"
            );
            let got: Vec<String> = log2.lock().unwrap().drain(..).collect();
            assert_eq!(
                got,
                [
                    "stage md 2",
                    "stage buf 1",
                    "shared md 2 saw OK",
                    "shared buf 1 saw WARNING",
                    "local md on owner",
                    "local buf on owner"
                ]
            );
            let mut h = me.acquire().unwrap();
            h.add_callback(buf, 1).unwrap().add_callback(md, 2).unwrap();
            let c = me.wait(h.read(&f, 8192, IoBuf::new(4096)));
            let e = c.check().unwrap_err();
            assert!(e.to_string().contains("invalid page (code 7)"), "{e}");
            assert!(
                e.to_string()
                    .starts_with("could not read 4096 bytes at offset 8192 of file"),
                "{e}"
            );
        })
        .unwrap()
        .join()
        .unwrap();
}

crate::for_every_method!(scenario);
