//! The manuals, part of the API documentation: how each piece works, what it guarantees and how
//! it is tested. The same pages are `docs/*.md` in the repository.
//!
#![cfg_attr(
    target_os = "linux",
    doc = "* [`shm`]: Go's mutex between processes ([`ShmMutex`][crate::shm::ShmMutex], its \
           condition variable, several locks and lock-free data in one \
           [`Mapping`][crate::shm::Mapping], statistics, crash-consistent updates, robustness \
           and its limits);"
)]
//! * [`rwlock`]: the readers-writer lock, Go's `RWMutex` ([`RwLock`][crate::RwLock], and
//!   `ShmRwLock` in shared memory);
#![cfg_attr(
    target_os = "linux",
    doc = "* [`accept`]: nginx's accept lock for prefork servers ([`crate::accept`]);"
)]
#![cfg_attr(
    feature = "profile",
    doc = "* [`profile`]: Go's mutex profile (feature `profile`);"
)]
//! * [`algorithm`]: the invariants of Go's lock that the implementation keeps.
//!
//! Each page is the Markdown file itself (`#[doc = include_str!(..)]`), so its examples run as
//! doc tests. Links between the pages are reference links: the file ends with the definitions
//! that work in the repository, and each module below puts the rustdoc ones first (the first
//! definition of a label wins).
//!
//! The shared-memory pages (`shm`, `accept`) are built on Linux, as the `shm` module is (docs.rs
//! builds the Linux documentation), and `profile` with its feature.

#[cfg(target_os = "linux")]
#[doc = "[rwlock-shm]: crate::guide::rwlock#in-shared-memory-shmshmrwlock"]
#[doc = include_str!("../docs/shm.md")]
pub mod shm {}

#[doc = include_str!("../docs/rwlock.md")]
pub mod rwlock {}

#[cfg(target_os = "linux")]
// The example is not part of the documentation: the link goes to the repository.
#[doc = "[accept_echo]: https://github.com/gomutex/gomutex/blob/main/examples/accept_echo.rs"]
#[doc = include_str!("../docs/accept.md")]
pub mod accept {}

#[cfg(feature = "profile")]
#[doc = include_str!("../docs/profile.md")]
pub mod profile {}

#[doc = include_str!("../docs/algorithm.md")]
pub mod algorithm {}
