// Lock-free shared data of a width that differs between 32- and 64-bit processes: the error
// says what to use instead (`AtomicU64`) and how to share plain data (behind a lock).
use gomutex::shm::{Mapping, MappingLayout};
use std::sync::atomic::AtomicUsize;

fn main() {
    let mut plan = MappingLayout::new();
    let at = plan.shared::<AtomicUsize>();
    let map = Mapping::anonymous(plan.len()).unwrap();
    let _ = map.shared::<AtomicUsize>(at);
}
