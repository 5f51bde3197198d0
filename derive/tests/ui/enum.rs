use gomutex::shm::{ShmSafe, ShmShared};

#[derive(Clone, Copy, ShmSafe)]
#[repr(u8)]
enum State {
    Idle,
    Busy,
}

#[derive(ShmShared)]
#[repr(C)]
enum Shared {
    A,
}

#[derive(Clone, Copy, ShmSafe)]
#[repr(C)]
union Bits {
    a: u32,
    b: f32,
}

fn main() {}
