//! Embedder callbacks that break the rules (found by a caller-side attack, 2026-12-07), on
//! every method: a panic in `stage`, in `message`/`report` (for an I/O redeemed by its
//! issuer or through a ticket, whose completion describes it on another thread), a result
//! the I/O cannot have, and `Aio::with_issuer` called from inside the thread's own issuer.
//! Each fails its I/O with an error naming the callback, and the issuer and the subsystem go
//! on: more such I/Os than the issuer has handles, then a plain read, then the drop.
//! Guards against: a panicking `stage` leaving its handle DEFINED for good (after
//! `io_max_concurrency` of them no handle was left, and the subsystem's drop waited for
//! ever); a panic in `message` unwinding through the reclaim (the handle stayed
//! COMPLETED_LOCAL and every later acquire panicked) or through a worker, reaper or
//! completer (a ticket's wait never returned); `Status::Unknown`, or OK for no bytes,
//! hiding an EIO (`check` said Ok); and `already mutably borrowed` from a re-entrant
//! `with_issuer`.

use crate::support::*;
use dbaio::{
    Aio, AioError, CallbackId, FaultAction, FaultRule, HandleCallbacks, IoBuf, IoContext,
    IoMethodKind, IoResult, Op, OpenOptions, ReportTarget, Status,
};

/// What a hostile callback does.
#[derive(Clone, Copy, PartialEq)]
enum Misdeed {
    PanicInStage,
    PanicInWords,
    UnknownStatus,
    OkForNothing,
    WithIssuerInStage,
}

struct Hostile {
    misdeed: Misdeed,
    aio: std::sync::OnceLock<Aio>,
}

impl HandleCallbacks for Hostile {
    fn name(&self) -> &'static str {
        "hostile"
    }
    fn stage(&self, _io: &IoContext<'_>, _data: u8) {
        match self.misdeed {
            Misdeed::PanicInStage => panic!("a stage callback panics"),
            Misdeed::WithIssuerInStage => {
                let aio = self.aio.get().expect("set after start");
                match aio.with_issuer(|_| ()) {
                    Err(AioError::ApiViolation(why)) => {
                        assert!(why.contains("from a callback"), "{why}")
                    }
                    other => panic!("expected an API violation, got {other:?}"),
                }
            }
            _ => {}
        }
    }
    fn complete_shared(&self, _io: &IoContext<'_>, prior: IoResult, _data: u8) -> IoResult {
        match self.misdeed {
            // A failure made this callback's own, so that its words describe it.
            Misdeed::PanicInWords if prior.status == Status::Error => IoResult {
                callback_id: 2,
                error_data: 1,
                ..prior
            },
            Misdeed::UnknownStatus => IoResult {
                status: Status::Unknown,
                ..prior
            },
            Misdeed::OkForNothing => IoResult {
                status: Status::Ok,
                result: 0,
                ..prior
            },
            _ => prior,
        }
    }
    fn message(&self, _result: &IoResult, _target: &ReportTarget<'_>) -> Option<String> {
        panic!("a message callback panics")
    }
    fn report(&self, _result: &IoResult) -> String {
        panic!("a report callback panics")
    }
}

fn start_hostile(m: IoMethodKind, misdeed: Misdeed) -> (Aio, CallbackId) {
    let mut b = Aio::builder(settings(m));
    let cb = std::sync::Arc::new(Hostile {
        misdeed,
        aio: std::sync::OnceLock::new(),
    });
    struct Shared(std::sync::Arc<Hostile>);
    impl HandleCallbacks for Shared {
        fn name(&self) -> &'static str {
            self.0.name()
        }
        fn stage(&self, io: &IoContext<'_>, data: u8) {
            self.0.stage(io, data)
        }
        fn complete_shared(&self, io: &IoContext<'_>, prior: IoResult, data: u8) -> IoResult {
            self.0.complete_shared(io, prior, data)
        }
        fn message(&self, r: &IoResult, t: &ReportTarget<'_>) -> Option<String> {
            self.0.message(r, t)
        }
        fn report(&self, r: &IoResult) -> String {
            self.0.report(r)
        }
    }
    let id = b.callback(Shared(std::sync::Arc::clone(&cb))).unwrap();
    let aio = b.start().unwrap();
    let _ = cb.aio.set(aio.clone());
    (aio, id)
}

/// Runs `misdeed` on `2 × io_max_concurrency` reads (each failing with an error whose text
/// contains `says`), then a plain read and the drop, all under a watchdog.
fn survives(m: IoMethodKind, misdeed: Misdeed, fault: bool, says: &'static str) {
    within(60, "hostile callbacks", move || {
        let d = dir();
        let path = data_file(&d, "f", 65536);
        let (aio, id) = start_hostile(m, misdeed);
        {
            let me = aio.register_issuer("hostile").unwrap();
            let f = aio.open(&path, &OpenOptions::read()).unwrap();
            if fault {
                aio.inject_fault(FaultRule::new(FaultAction::Errno(libc::EIO)).op(Op::Readv));
            }
            for k in 0..2 * aio.handles_per_issuer() as u64 {
                let mut h = me.acquire().unwrap();
                h.add_callback(id, 0).unwrap();
                let c = me.wait(h.read(&f, k % 8 * 4096, IoBuf::new(4096)));
                let e = c.check().expect_err("the I/O fails");
                assert!(e.to_string().contains(says), "{e}");
            }
            // ... and through a ticket, whose result is described where it completes.
            let mut h = me.acquire().unwrap();
            h.add_callback(id, 0).unwrap();
            let t = h.read(&f, 0, IoBuf::new(4096)).into_ticket();
            let e = t.wait().check().expect_err("the I/O fails");
            assert!(e.to_string().contains(says), "{e}");
            aio.clear_faults();
            let plain = me.read_exact_at(&f, 8192, IoBuf::new(4096)).unwrap();
            assert_pattern(&plain, 8192);
        }
        drop(aio);
    });
}

fn a_panicking_stage_fails_its_io_and_gives_the_handle_back(m: IoMethodKind) {
    survives(
        m,
        Misdeed::PanicInStage,
        false,
        "its hostile callback panicked",
    );
}

fn a_panicking_message_leaves_the_error_described_without_it(m: IoMethodKind) {
    // The words left out: the base line and the errno.
    survives(
        m,
        Misdeed::PanicInWords,
        true,
        "could not read 4096 bytes at offset",
    );
}

fn a_result_the_io_cannot_have_fails_it(m: IoMethodKind) {
    let says = "its hostile callback returned a result the I/O cannot have";
    survives(m, Misdeed::UnknownStatus, true, says);
    survives(m, Misdeed::OkForNothing, false, says);
}

fn with_issuer_from_inside_the_issuer_is_an_api_violation(m: IoMethodKind) {
    within(60, "re-entrant with_issuer", move || {
        let d = dir();
        let path = data_file(&d, "f", 8192);
        let (aio, id) = start_hostile(m, Misdeed::WithIssuerInStage);
        let done = aio
            .with_issuer(|me| {
                let f = aio.open(&path, &OpenOptions::read()).unwrap();
                let mut h = me.acquire().unwrap();
                h.add_callback(id, 0).unwrap();
                let c = me.wait(h.read(&f, 0, IoBuf::new(4096)));
                c.check().unwrap();
                assert_pattern(&c.into_buf(), 0);
            })
            .map_err(|e| e.to_string());
        assert_eq!(done, Ok(()));
        drop(aio);
    });
}

crate::for_every_method!(
    a_panicking_stage_fails_its_io_and_gives_the_handle_back,
    a_panicking_message_leaves_the_error_described_without_it,
    a_result_the_io_cannot_have_fails_it,
    with_issuer_from_inside_the_issuer_is_an_api_violation,
);
