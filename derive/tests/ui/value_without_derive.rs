// A value type with neither the derive nor an impl: the error says what to do (the derive behind
// feature `derive`, `#[repr(C)]`, `ShmBool` for bool, `u64` for usize).
use gomutex::shm::ShmMutex;

#[derive(Clone, Copy)]
#[repr(C)]
struct Board {
    jobs: u32,
    open: u32,
}

fn main() {
    let _ = ShmMutex::anonymous(Board { jobs: 0, open: 0 });
}
