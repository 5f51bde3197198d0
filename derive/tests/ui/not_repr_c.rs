use gomutex::shm::ShmSafe;

#[derive(Clone, Copy, ShmSafe)]
struct Stats {
    requests: u64,
    errors: u32,
}

#[derive(Clone, Copy, ShmSafe)]
#[repr(packed)]
struct Packed {
    requests: u64,
}

fn main() {}
