use gomutex::shm::ShmSafe;

#[derive(Clone, Copy, ShmSafe)]
#[repr(C)]
struct Flags {
    jobs: u32,
    go: bool,
}

fn main() {}
