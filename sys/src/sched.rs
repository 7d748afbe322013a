//! The scheduling policy of a background executor thread.

/// Puts the calling thread under `SCHED_BATCH`: the same share of the CPU as any normal
/// thread, but woken it does not preempt the thread running on its CPU. An I/O worker woken
/// by a submission then runs when the submitter waits or its turn ends, instead of taking
/// the CPU from the submitter in the middle of its batch. Needs no privilege.
pub fn run_as_batch() -> std::io::Result<()> {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: pid 0 names the calling thread; `param` is a valid sched_param for the call.
    let r = unsafe { libc::sched_setscheduler(0, libc::SCHED_BATCH, &param) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}
