//! `--threads`: the global pool takes the configured count before its first use and
//! reports the count it has afterwards (its own test binary: the pool is process-wide).

use folio_kernels::pool::ThreadPool;

#[test]
fn the_global_pool_takes_the_configured_count_once() {
    assert_eq!(ThreadPool::configure_global(3), Ok(()));
    assert_eq!(ThreadPool::global().n_threads(), 3);
    // The same count again is fine; another one cannot apply to a running pool.
    assert_eq!(ThreadPool::configure_global(3), Ok(()));
    assert_eq!(ThreadPool::configure_global(1), Err(3));
    let hits = std::sync::atomic::AtomicUsize::new(0);
    ThreadPool::global().run(12, &|_| {
        hits.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    });
    assert_eq!(hits.into_inner(), 12);
}
