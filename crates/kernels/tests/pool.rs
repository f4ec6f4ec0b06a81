//! ThreadPool: coverage, nesting, concurrent callers, panics.

use folio_kernels::ThreadPool;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

#[test]
fn run_covers_every_index_exactly_once() {
    for threads in [1, 2, 3, 8] {
        let pool = ThreadPool::new(threads);
        assert_eq!(pool.n_threads(), threads);
        for n in [0, 1, 2, 5, 64, 1000] {
            let hits: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
            for _ in 0..20 {
                pool.run(n, &|i| {
                    hits[i].fetch_add(1, Ordering::Relaxed);
                });
            }
            for (i, h) in hits.iter().enumerate() {
                assert_eq!(
                    h.load(Ordering::Relaxed),
                    20,
                    "threads {threads} n {n} index {i}"
                );
            }
        }
    }
}

#[test]
fn nested_run_runs_inline_without_deadlock() {
    let pool = ThreadPool::new(3);
    let total = AtomicUsize::new(0);
    pool.run(8, &|_| {
        pool.run(5, &|j| {
            total.fetch_add(j + 1, Ordering::Relaxed);
        });
    });
    assert_eq!(total.load(Ordering::Relaxed), 8 * 15);
}

#[test]
fn concurrent_callers_are_serialized() {
    let pool = Arc::new(ThreadPool::new(2));
    let handles: Vec<_> = (0..4)
        .map(|t| {
            let pool = Arc::clone(&pool);
            std::thread::spawn(move || {
                let mut sums = 0usize;
                for k in 0..200 {
                    let acc = AtomicUsize::new(0);
                    pool.run(16 + (k % 5), &|i| {
                        acc.fetch_add(i, Ordering::Relaxed);
                    });
                    let n = 16 + (k % 5);
                    assert_eq!(acc.load(Ordering::Relaxed), n * (n - 1) / 2, "caller {t}");
                    sums += 1;
                }
                sums
            })
        })
        .collect();
    for h in handles {
        assert_eq!(h.join().expect("caller thread"), 200);
    }
}

#[test]
fn works_after_workers_park() {
    let pool = ThreadPool::new(2);
    let c = AtomicUsize::new(0);
    pool.run(10, &|_| {
        c.fetch_add(1, Ordering::Relaxed);
    });
    std::thread::sleep(std::time::Duration::from_millis(20)); // workers park
    pool.run(10, &|_| {
        c.fetch_add(1, Ordering::Relaxed);
    });
    assert_eq!(c.load(Ordering::Relaxed), 20);
}

#[test]
fn a_panicking_task_propagates_and_pool_stays_usable() {
    let pool = ThreadPool::new(2);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        pool.run(50, &|i| {
            if i == 17 {
                panic!("task 17 fails");
            }
        });
    }));
    assert!(r.is_err());
    let c = AtomicUsize::new(0);
    pool.run(50, &|_| {
        c.fetch_add(1, Ordering::Relaxed);
    });
    assert_eq!(c.load(Ordering::Relaxed), 50);
}
