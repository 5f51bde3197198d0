use gomutex::shm::ShmSafe;

#[derive(Clone, Copy, ShmSafe)]
#[repr(C)]
struct Node {
    value: u64,
    next: *const Node,
}

fn main() {}
