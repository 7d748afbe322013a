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
    IoMethodKind, IoResult, Op, OpenOptions, PageVerdict, PageVerification, PageVerifier,
    ReportTarget, Status,
};

/// What a hostile callback does.
#[derive(Clone, Copy, PartialEq)]
enum Misdeed {
    PanicInStage,
    PanicInWords,
    WithIssuerInShared,
    ShutdownInStage,
    ShutdownInShared,
    UnknownStatus,
    OkForNothing,
    WithIssuerInStage,
    WaitInStage,
    WaitInShared,
    RegisterInShared,
    TicketInMessage,
}

struct Hostile {
    misdeed: Misdeed,
    aio: std::sync::OnceLock<Aio>,
    /// A ticket the I/O's own `message` takes and waits for (`TicketInMessage`).
    ticket: std::sync::Mutex<Option<dbaio::Ticket>>,
}

impl HandleCallbacks for Hostile {
    fn name(&self) -> &'static str {
        "hostile"
    }
    fn stage(&self, io: &IoContext<'_>, _data: u8) {
        match self.misdeed {
            Misdeed::PanicInStage => panic!("a stage callback panics"),
            Misdeed::ShutdownInStage => self.aio.get().expect("set after start").shutdown(),
            Misdeed::WithIssuerInStage => {
                let aio = self.aio.get().expect("set after start");
                match aio.with_issuer(|_| ()) {
                    Err(AioError::ApiViolation(why)) => {
                        assert!(why.contains("from a handle callback"), "{why}")
                    }
                    other => panic!("expected an API violation, got {other:?}"),
                }
            }
            Misdeed::WaitInStage => refused_wait(self.aio.get().expect("set after start"), io),
            _ => {}
        }
    }
    fn complete_shared(&self, io: &IoContext<'_>, prior: IoResult, _data: u8) -> IoResult {
        let aio = || self.aio.get().expect("set after start");
        match self.misdeed {
            Misdeed::WaitInShared => {
                refused_wait(aio(), io);
                prior
            }
            Misdeed::RegisterInShared => match aio().register_issuer("inside") {
                Err(AioError::ApiViolation(why)) => {
                    assert!(why.contains("from a handle callback"), "{why}");
                    prior
                }
                Err(e) => panic!("expected an API violation, got {e}"),
                Ok(_) => panic!("expected an API violation, got an issuer"),
            },
            Misdeed::TicketInMessage if prior.status == Status::Error => IoResult {
                callback_id: 2,
                error_data: 1,
                ..prior
            },
            Misdeed::WithIssuerInShared => match aio().with_issuer(|_| ()) {
                Err(AioError::ApiViolation(why)) => {
                    assert!(why.contains("from a handle callback"), "{why}");
                    prior
                }
                other => panic!("expected an API violation, got {other:?}"),
            },
            Misdeed::ShutdownInShared => {
                aio().shutdown();
                prior
            }
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
        if self.misdeed == Misdeed::TicketInMessage {
            // Its own I/O's ticket, taken and waited for: refused (a panic), not a deadlock.
            let ticket = self.ticket.lock().unwrap().take();
            if let Some(t) = ticket {
                let _ = t.wait();
            }
            return Some("not reached with a ticket".into());
        }
        panic!("a message callback panics")
    }
    fn report(&self, _result: &IoResult) -> String {
        panic!("a report callback panics")
    }
}

/// Waits for the callback's own I/O, which must be refused rather than never end.
fn refused_wait(aio: &Aio, io: &IoContext<'_>) {
    match aio.wait(io.wait_ref()) {
        Err(AioError::ApiViolation(why)) => {
            assert!(why.contains("inside a handle callback"), "{why}")
        }
        other => panic!("expected an API violation, got {other:?}"),
    }
}

fn start_hostile(m: IoMethodKind, misdeed: Misdeed) -> (Aio, CallbackId) {
    let mut b = Aio::builder(settings(m));
    let cb = std::sync::Arc::new(Hostile {
        misdeed,
        aio: std::sync::OnceLock::new(),
        ticket: std::sync::Mutex::new(None),
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
    HOSTILE.with(|h| *h.borrow_mut() = Some(std::sync::Arc::clone(&cb)));
    (aio, id)
}

thread_local! {
    /// The callback `start_hostile` made last on this thread, for tests that reach into it.
    static HOSTILE: std::cell::RefCell<Option<std::sync::Arc<Hostile>>> =
        const { std::cell::RefCell::new(None) };
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
    survives(
        m,
        Misdeed::PanicInWords,
        true,
        "its hostile callback's report and message panicked (see the log)",
    );
}

fn a_result_the_io_cannot_have_fails_it(m: IoMethodKind) {
    let says = "its hostile callback returned a result the I/O cannot have";
    survives(m, Misdeed::UnknownStatus, true, says);
    survives(m, Misdeed::OkForNothing, false, says);
}

fn with_issuer_from_inside_the_issuer_is_an_api_violation(m: IoMethodKind) {
    for misdeed in [Misdeed::WithIssuerInStage, Misdeed::WithIssuerInShared] {
        reenters(m, misdeed, false);
    }
}

/// A stage or completion callback waiting for its own I/O gets an API-violation error (it
/// waited for ever on every method: the I/O completes only once the callback returns), and
/// the I/O completes with its bytes. Guards against a callback's wait hanging its thread.
fn a_wait_from_a_callback_is_an_api_violation(m: IoMethodKind) {
    for misdeed in [Misdeed::WaitInStage, Misdeed::WaitInShared] {
        reenters(m, misdeed, false);
    }
}

/// `Aio::register_issuer` from a completion callback is an API-violation error on every
/// method, and the I/O completes with its bytes. Guards against an issuer made there whose
/// waits were refused inside its own reads (an `unreachable!` panic on io_uring and sim,
/// success elsewhere: found by a caller-side attack).
fn register_issuer_from_a_callback_is_an_api_violation(m: IoMethodKind) {
    reenters(m, Misdeed::RegisterInShared, false);
}

/// A failed I/O's `message` that takes the I/O's own ticket and waits on it does not
/// deadlock: the wait is refused (a panic, caught), the error is described without the
/// message, and a wait on the I/O from outside returns. Guards against the description
/// running under the ticket's lock (io_uring and sim hung for ever, 8 of 8 runs).
fn a_message_waiting_on_its_own_ticket_does_not_deadlock(m: IoMethodKind) {
    within(60, "a message waiting on its own ticket", move || {
        let d = dir();
        let path = data_file(&d, "f", 8192);
        let (aio, id) = start_hostile(m, Misdeed::TicketInMessage);
        let cb = HOSTILE
            .with(|h| h.borrow().clone())
            .expect("made on this thread");
        let me = aio.register_issuer("words").unwrap();
        let f = aio.open(&path, &OpenOptions::read()).unwrap();
        aio.inject_fault(FaultRule::new(FaultAction::Errno(libc::EIO)).op(Op::Readv));
        let mut h = me.acquire().unwrap();
        h.add_callback(id, 0).unwrap();
        let t = h.read(&f, 0, IoBuf::new(4096)).into_ticket();
        let wref = t.wait_ref();
        // (On sync and worker the I/O may be described before the ticket is stored.)
        *cb.ticket.lock().unwrap() = Some(t);
        aio.wait(wref).unwrap();
        if let Some(t) = cb.ticket.lock().unwrap().take() {
            assert!(t.wait().check().is_err());
        }
        aio.clear_faults();
        assert_pattern(&me.read_exact_at(&f, 0, IoBuf::new(4096)).unwrap(), 0);
        drop(me);
        drop(aio);
    });
}

/// `Aio::wait` on a ticket's own I/O from inside the ticket's waker (run on the thread
/// completing the I/O, before it counts as complete) is an API-violation error, not a wait
/// for ever (io_uring and sim hung). Where the I/O is complete at the first poll the waker
/// never runs.
fn a_wait_from_a_waker_on_its_own_io_is_an_api_violation(m: IoMethodKind) {
    struct Waits {
        aio: Aio,
        wref: dbaio::WaitRef,
        said: std::sync::Mutex<Option<Result<(), String>>>,
    }
    impl std::task::Wake for Waits {
        fn wake(self: std::sync::Arc<Self>) {
            let r = self.aio.wait(self.wref).map_err(|e| e.to_string());
            *self.said.lock().unwrap() = Some(r);
        }
    }
    within(60, "a waker waiting on its own I/O", move || {
        let d = dir();
        let path = data_file(&d, "f", 8192);
        let aio = start(m);
        let me = aio.register_issuer("waker").unwrap();
        let f = aio.open(&path, &OpenOptions::read()).unwrap();
        let mut t = me
            .acquire()
            .unwrap()
            .read(&f, 0, IoBuf::new(4096))
            .into_ticket();
        let waits = std::sync::Arc::new(Waits {
            aio: aio.clone(),
            wref: t.wait_ref(),
            said: std::sync::Mutex::new(None),
        });
        let waker = std::task::Waker::from(std::sync::Arc::clone(&waits));
        let mut cx = std::task::Context::from_waker(&waker);
        let first = std::future::Future::poll(std::pin::Pin::new(&mut t), &mut cx);
        aio.wait(t.wait_ref()).unwrap();
        let c = match first {
            std::task::Poll::Ready(c) => c,
            std::task::Poll::Pending => {
                let said = waits.said.lock().unwrap().take().expect("the waker ran");
                let why = said.expect_err("a wait inside the waker is refused");
                assert!(
                    why.contains("inside a handle callback or a future's waker"),
                    "{why}"
                );
                t.wait()
            }
        };
        assert_pattern(&c.into_buf(), 0);
        drop(me);
        drop(aio);
    });
}

thread_local! {
    /// The issuer of the thread running `a_waker_using_the_issuer_it_runs_in_gets_an_api_violation`.
    static ME: std::cell::RefCell<Option<dbaio::Issuer>> = const { std::cell::RefCell::new(None) };
}

/// A waker that runs inside its issuer's own call (`end_batch` completing the I/O on the
/// issuer's thread) and uses that issuer again gets an API-violation error, not a `RefCell`
/// panic (`already borrowed`, on worker threads and processes and sim: found by a
/// caller-side attack), and the I/O completes with its bytes. (Where the waker runs
/// outside the issuer's calls, or on another thread, it may use what it reaches.)
fn a_waker_using_the_issuer_it_runs_in_gets_an_api_violation(m: IoMethodKind) {
    struct UsesIssuer {
        said: std::sync::Mutex<Vec<String>>,
    }
    impl std::task::Wake for UsesIssuer {
        fn wake(self: std::sync::Arc<Self>) {
            // Left as it is if what follows panics.
            self.said.lock().unwrap().push("panicked".to_string());
            let said = ME.with(|me| match me.borrow().as_ref() {
                None => "another thread".to_string(),
                Some(me) => match me.acquire() {
                    Err(e) => e.to_string(),
                    Ok(_) => "acquired".to_string(),
                },
            });
            *self.said.lock().unwrap().last_mut().unwrap() = said;
        }
    }
    within(60, "a waker using its issuer", move || {
        let d = dir();
        let path = data_file(&d, "f", 8192);
        let aio = start(m);
        ME.with(|me| *me.borrow_mut() = Some(aio.register_issuer("waker").unwrap()));
        let f = aio.open(&path, &OpenOptions::read().direct(true)).unwrap();
        let uses = std::sync::Arc::new(UsesIssuer {
            said: std::sync::Mutex::new(Vec::new()),
        });
        let waker = std::task::Waker::from(std::sync::Arc::clone(&uses));
        let mut cx = std::task::Context::from_waker(&waker);
        let c = ME.with(|me| {
            let me = me.borrow();
            let me = me.as_ref().unwrap();
            me.begin_batch().unwrap();
            let mut t = me
                .acquire()
                .unwrap()
                .read(&f, 0, IoBuf::new(4096))
                .into_ticket();
            let first = std::future::Future::poll(std::pin::Pin::new(&mut t), &mut cx);
            me.end_batch();
            match first {
                std::task::Poll::Ready(c) => c,
                std::task::Poll::Pending => t.wait(),
            }
        });
        assert_pattern(&c.into_buf(), 0);
        for said in uses.said.lock().unwrap().iter() {
            // Run outside the issuer's calls (in `Ticket::wait`) it may take a handle.
            assert!(
                said == "another thread"
                    || said == "acquired"
                    || said.contains("inside one of its own calls"),
                "{said}"
            );
        }
        ME.with(|me| drop(me.borrow_mut().take()));
        drop(aio);
    });
}

/// `Aio::shutdown` from a stage or completion callback returns (the I/O the thread is
/// staging or completing is one it would wait for: it hung on every method), and the I/O
/// itself completes. Guards against the callback's thread waiting for itself.
fn shutdown_from_a_callback_returns(m: IoMethodKind) {
    for misdeed in [Misdeed::ShutdownInStage, Misdeed::ShutdownInShared] {
        reenters(m, misdeed, true);
    }
}

/// A read through `with_issuer` with a callback doing `misdeed`, which must not keep the
/// read from completing with its bytes (`shutting`: the callback shuts the subsystem down).
fn reenters(m: IoMethodKind, misdeed: Misdeed, shutting: bool) {
    within(60, "a callback re-entering the subsystem", move || {
        let d = dir();
        let path = data_file(&d, "f", 8192);
        let (aio, id) = start_hostile(m, misdeed);
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
        assert_eq!(aio.is_shut_down(), shutting);
        drop(aio);
    });
}

/// A page verifier that panics on block 5: each read of it fails as an invalid page, and
/// the next reader reads it again rather than waiting on a read long finished (it spun at
/// 100% CPU for ever on every method: the panic skipped the end of the buffer's I/O).
fn a_panicking_page_verifier_leaves_the_block_readable_again(m: IoMethodKind) {
    struct Touchy;
    impl PageVerifier for Touchy {
        fn verify(&self, _page: &[u8], block: u32) -> PageVerdict {
            assert_ne!(block, 5, "a verifier panics on block 5");
            PageVerdict::Valid
        }
    }
    within(60, "a panicking page verifier", move || {
        let d = dir();
        let path = data_file(&d, "rel", 16 * 8192);
        let mut b = Aio::builder(settings(m));
        b.page_verifier(Touchy);
        let aio = b.start().unwrap();
        let me = aio.register_issuer("verify").unwrap();
        me.set_page_verification(PageVerification::ERROR);
        let f = aio.open(&path, &OpenOptions::read()).unwrap();
        for _ in 0..3 {
            let e = me.read_block(&f, 5).err().expect("block 5 is invalid");
            assert!(e.to_string().starts_with("invalid page in block 5"), "{e}");
            assert_pattern(me.read_block(&f, 6).unwrap().page(), 6 * 8192);
        }
        aio.check_buffer_mapping().unwrap();
    });
}

crate::for_every_method!(
    a_panicking_stage_fails_its_io_and_gives_the_handle_back,
    a_panicking_message_leaves_the_error_described_without_it,
    a_result_the_io_cannot_have_fails_it,
    with_issuer_from_inside_the_issuer_is_an_api_violation,
    a_wait_from_a_callback_is_an_api_violation,
    register_issuer_from_a_callback_is_an_api_violation,
    a_message_waiting_on_its_own_ticket_does_not_deadlock,
    a_wait_from_a_waker_on_its_own_io_is_an_api_violation,
    a_waker_using_the_issuer_it_runs_in_gets_an_api_violation,
    shutdown_from_a_callback_returns,
    a_panicking_page_verifier_leaves_the_block_readable_again,
);
