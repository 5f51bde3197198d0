use gomutex::shm::ShmSafe;

#[derive(Clone, Copy, ShmSafe)]
#[repr(C)]
struct Sizes(u64, usize);

fn main() {}
