// A field type that depends on a type parameter is checked at the definition, under the bounds
// the impl will have (`T: ShmShared`): `Vec<T>` is refused even though `[T; 2]` is fine.
use gomutex::shm::ShmShared;

#[derive(ShmShared)]
#[repr(C)]
struct Slots<T> {
    inline: [T; 2],
    spill: Vec<T>,
}

fn main() {}
