//! Settings are validated when the subsystem starts, not only when parsed (issue 15, item 3):
//! `Settings` built in code with a value outside its range, or a buffer pool too small for its
//! issuers, make `Aio::start` return PostgreSQL's error — never an assert or a panic. Before:
//! `io_workers = 0` (now: a self-sizing pool) panicked in the worker pool ("a worker pool needs at
//! least one worker"), `io_worker_queue_size = 0` likewise, and a pool smaller than `max_issuers`
//! started.
//! Guards against: `Aio::start` trusting `Settings` built in code, so an out-of-range value panics
//! inside the subsystem or starts it anyway (a buffer pool smaller than `max_issuers`, where an
//! issuer may find no buffer to pin); and errors worded otherwise than PostgreSQL's.

use dbaio::{Aio, AioError, IoMethodKind, Settings};

fn start_err(s: Settings) -> String {
    match std::panic::catch_unwind(|| Aio::start(s)) {
        Ok(Err(AioError::Settings(e))) => e.to_string(),
        Ok(Err(other)) => panic!("not a settings error: {other}"),
        Ok(Ok(_)) => panic!("started with bad settings"),
        Err(_) => panic!("Aio::start panicked on bad settings"),
    }
}

#[test]
fn bad_settings_built_in_code_are_refused_at_start() {
    let base = Settings {
        io_method: IoMethodKind::Worker,
        ..Settings::default()
    };
    assert_eq!(
        start_err(Settings {
            io_workers: 33,
            ..base.clone()
        }),
        "33 is outside the valid range for parameter \"io_workers\" (0 .. 32)"
    );
    assert_eq!(
        start_err(Settings {
            io_worker_queue_size: 0,
            ..base.clone()
        }),
        "0 is outside the valid range for parameter \"io_worker_queue_size\" (16 .. 65536)"
    );
    assert_eq!(
        start_err(Settings {
            io_max_concurrency: 5000,
            ..base.clone()
        }),
        "5000 is outside the valid range for parameter \"io_max_concurrency\" (-1 .. 1024)"
    );
    assert_eq!(
        start_err(Settings {
            io_max_concurrency: 0,
            ..base.clone()
        }),
        "invalid value for parameter \"io_max_concurrency\": 0\nDETAIL:  Only -1 or values bigger than 0 are valid."
    );
    assert_eq!(
        start_err(Settings {
            block_size: 3000,
            ..base.clone()
        }),
        "invalid value for parameter \"block_size\": \"3000\"\nDETAIL:  The block size must be a power of two."
    );
    assert_eq!(
        start_err(Settings {
            buffer_pool_size: 16,
            max_issuers: 64,
            ..base.clone()
        }),
        "buffer_pool_size (16 blocks) is too small for max_issuers (64)\n\
         DETAIL:  Every issuer needs two buffers it can pin (the block its caller holds, and the \
         next one a read stream reads), so at least twice max_issuers, as PostgreSQL asks of \
         shared_buffers.\n\
         HINT:  Raise buffer_pool_size, or lower max_issuers."
    );
    assert_eq!(
        start_err(Settings {
            max_issuers: 0,
            ..base.clone()
        }),
        "0 is outside the valid range for parameter \"max_issuers\" (1 .. 4096)"
    );
    assert!(Aio::start(base).is_ok(), "the defaults start");
}
