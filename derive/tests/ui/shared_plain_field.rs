use gomutex::shm::ShmShared;
use std::sync::atomic::AtomicU64;

#[derive(ShmShared)]
#[repr(C)]
struct Stats {
    requests: AtomicU64,
    total: u64,
}

fn main() {}
