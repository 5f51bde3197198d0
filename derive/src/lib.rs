//! `#[derive(ShmSafe)]` and `#[derive(ShmShared)]`: implement
//! [gomutex](https://docs.rs/gomutex)'s shared-memory marker traits `gomutex::shm::ShmSafe` (plain
//! data behind a `ShmMutex`) and `gomutex::shm::ShmShared` (data shared without a lock, through
//! atomics) for your own structs, without writing `unsafe impl`.
//!
//! Use them through gomutex's `derive` feature, which re-exports both next to the traits of the
//! same name (as serde does with `Serialize`):
//!
//! ```toml
//! [dependencies]
//! gomutex = { version = "0.1", features = ["derive"] }
//! ```
//!
//! ```
//! # #[cfg(target_os = "linux")] fn main() -> Result<(), gomutex::shm::ShmError> {
//! use gomutex::shm::{ShmMutex, ShmSafe};
//!
//! #[derive(Clone, Copy, Default, ShmSafe)]
//! #[repr(C)]
//! struct Stats {
//!     requests: u64,
//!     errors: u32,
//!     last_worker: u32,
//! }
//!
//! let m = ShmMutex::anonymous(Stats::default())?;
//! m.lock().unwrap().requests += 1;
//! # Ok(()) }
//! # #[cfg(not(target_os = "linux"))] fn main() {}
//! ```
//!
//! # What is checked
//!
//! The traits' safety contracts ask for the same layout in every process, no pointers, and
//! validity for every bit pattern. The derives prove what a compiler can and refuse the rest:
//!
//! * **structs only** (named, tuple or unit). An enum is refused (not every bit pattern is one of
//!   its variants: store the discriminant in a `u8` or `u32` field, or an atomic one); a union
//!   too (which field holds a valid value is not known; implement the trait by hand).
//! * **`#[repr(C)]` or `#[repr(transparent)]`** (with `align(N)` or `packed` beside `C` if you
//!   like): Rust's default layout may differ between builds, so two programs, or two versions of
//!   one, could disagree on where a field lies.
//! * **every field's type implements the trait**, checked where the struct is defined: a `bool`,
//!   `char`, `usize`, pointer, reference, `Vec` or (for `ShmShared`) plain `u64` field is a
//!   compile error pointing at that field.
//! * **generics**: every type parameter gets the trait as a bound, and the fields are checked
//!   under exactly the bounds of the impl, so `struct Pair<T> { a: T, b: T }` implements
//!   `ShmSafe` for `Pair<u32>` and a field like `Vec<T>` is refused at the definition.
//!
//! The traits' supertraits do the rest: `ShmSafe` needs `Copy` (derive `Clone, Copy` too), both
//! need `Sync + 'static` (no lifetime parameters other than `'static`).
//!
//! The generated code names `::gomutex::shm`, so the dependency must be called `gomutex`, and
//! the module is Linux only, as the traits are.

#![forbid(unsafe_code)]
#![deny(missing_docs)]

use proc_macro::TokenStream;
use proc_macro2::TokenStream as TokenStream2;
use quote::{quote, quote_spanned};
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{parse_macro_input, parse_quote, Data, DeriveInput, Error, Ident, Meta, Token};
use syn::{PredicateType, Type, WherePredicate};

/// Implements `gomutex::shm::ShmSafe`: plain data that may live in shared memory behind a
/// `ShmMutex`.
///
/// The struct must be `#[repr(C)]` (or `#[repr(transparent)]`), `Copy`, and every field's type
/// `ShmSafe` (fixed-width integers, floats, `ShmBool`, arrays and other `ShmSafe` structs; not
/// `bool`, `char`, `usize`/`isize`, enums, pointers or references). Anything else is a compile
/// error at the offending attribute or field. Each type parameter gets a `ShmSafe` bound.
///
/// ```
/// # #[cfg(target_os = "linux")] fn main() -> Result<(), gomutex::shm::ShmError> {
/// use gomutex::shm::{ShmBool, ShmMutex, ShmSafe};
///
/// #[derive(Clone, Copy, Default, ShmSafe)]
/// #[repr(C)]
/// struct Board {
///     jobs: u32,
///     go: ShmBool, // not `bool`: a killed writer may leave any byte
///     _pad: [u8; 3],
/// }
///
/// let m = ShmMutex::anonymous(Board::default())?;
/// m.lock().unwrap().go.set(true);
/// # Ok(()) }
/// # #[cfg(not(target_os = "linux"))] fn main() {}
/// ```
#[proc_macro_derive(ShmSafe)]
pub fn derive_shm_safe(input: TokenStream) -> TokenStream {
    expand(parse_macro_input!(input as DeriveInput), Marker::Safe)
        .unwrap_or_else(Error::into_compile_error)
        .into()
}

/// Implements `gomutex::shm::ShmShared`: data that processes share without a lock, through
/// atomic operations (see `gomutex::shm::Mapping::shared`).
///
/// The struct must be `#[repr(C)]` (or `#[repr(transparent)]`) and every field's type
/// `ShmShared` (the fixed-width atomics `AtomicU8`..`AtomicU64`, `AtomicI8`..`AtomicI64`, arrays
/// and other `ShmShared` structs; not plain integers, which another process could read while
/// they are being written, nor `AtomicUsize`/`AtomicBool`/`AtomicPtr`). Anything else is a
/// compile error at the offending attribute or field. Each type parameter gets a `ShmShared`
/// bound.
///
/// ```
/// # #[cfg(target_os = "linux")] fn main() -> Result<(), gomutex::shm::ShmError> {
/// use gomutex::shm::{Mapping, MappingLayout, ShmShared};
/// use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
///
/// #[derive(ShmShared)]
/// #[repr(C)]
/// struct Heartbeats {
///     ticks: [AtomicU64; 4],
///     workers: AtomicU32,
/// }
///
/// let mut plan = MappingLayout::new();
/// let at = plan.shared::<Heartbeats>();
/// let map = Mapping::anonymous(plan.len())?;
/// map.shared::<Heartbeats>(at)?.ticks[0].fetch_add(1, Relaxed);
/// # Ok(()) }
/// # #[cfg(not(target_os = "linux"))] fn main() {}
/// ```
#[proc_macro_derive(ShmShared)]
pub fn derive_shm_shared(input: TokenStream) -> TokenStream {
    expand(parse_macro_input!(input as DeriveInput), Marker::Shared)
        .unwrap_or_else(Error::into_compile_error)
        .into()
}

/// Which of the two marker traits to implement.
#[derive(Clone, Copy)]
enum Marker {
    Safe,
    Shared,
}

impl Marker {
    fn name(self) -> &'static str {
        match self {
            Marker::Safe => "ShmSafe",
            Marker::Shared => "ShmShared",
        }
    }

    fn path(self) -> TokenStream2 {
        match self {
            Marker::Safe => quote!(::gomutex::shm::ShmSafe),
            Marker::Shared => quote!(::gomutex::shm::ShmShared),
        }
    }

    /// What to store an enum's discriminant in instead.
    fn enum_instead(self) -> &'static str {
        match self {
            Marker::Safe => "a u8 or u32 field (with constants for the values)",
            Marker::Shared => "an AtomicU8 or AtomicU32 field (with constants for the values)",
        }
    }
}

fn expand(mut input: DeriveInput, marker: Marker) -> Result<TokenStream2, Error> {
    let name = marker.name();
    let fields = match &input.data {
        Data::Struct(s) => &s.fields,
        Data::Enum(e) => {
            return Err(Error::new(
                e.enum_token.span(),
                format!(
                    "#[derive({name})] is not available for enums: an enum is not valid for every \
                     bit pattern (a process killed mid-update, or a peer, may leave any byte in \
                     shared memory); store the discriminant in {}",
                    marker.enum_instead()
                ),
            ))
        }
        Data::Union(u) => {
            return Err(Error::new(
                u.union_token.span(),
                format!(
                    "#[derive({name})] is not available for unions: which field holds a valid \
                     value cannot be checked; use a struct, or write `unsafe impl {name}` by hand \
                     with a SAFETY comment"
                ),
            ))
        }
    };
    check_repr(&input, name)?;

    let path = marker.path();
    // Each type parameter gets the trait as a bound where the user bounds it already (clippy's
    // `multiple_bound_locations` would flag a second place, on the user's spans).
    let in_where: Vec<Ident> = match &input.generics.where_clause {
        None => Vec::new(),
        Some(w) => w
            .predicates
            .iter()
            .filter_map(|p| match p {
                WherePredicate::Type(PredicateType {
                    bounded_ty: Type::Path(t),
                    ..
                }) if t.qself.is_none() => t.path.get_ident().cloned(),
                _ => None,
            })
            .collect(),
    };
    let mut to_where = Vec::new();
    for param in input.generics.type_params_mut() {
        if in_where.contains(&param.ident) {
            to_where.push(param.ident.clone());
        } else {
            param.bounds.push(parse_quote!(#path));
        }
    }
    if let Some(w) = &mut input.generics.where_clause {
        let bound = |t: &Ident| -> WherePredicate { parse_quote!(#t: #path) };
        w.predicates.extend(to_where.iter().map(bound));
    }
    let (impl_generics, ty_generics, where_clause) = input.generics.split_for_impl();
    // One call per field, spanned at the field's type so that an error points there.
    let asserts = fields.iter().map(|f| {
        let ty = &f.ty;
        quote_spanned!(ty.span()=> __gomutex_assert_field::<#ty>();)
    });
    let ident = &input.ident;
    Ok(quote! {
        #[allow(dead_code, non_snake_case)]
        const _: () = {
            fn __gomutex_assert_field<__GomutexField: ?::core::marker::Sized + #path>() {}
            // The fields, checked under exactly the impl's bounds: the impl is sound because
            // this compiles.
            fn __gomutex_check_fields #impl_generics () #where_clause {
                #(#asserts)*
            }
            // SAFETY: `#[repr(C)]` or `#[repr(transparent)]` (checked by the derive), and every
            // field's type implements the trait (checked above), so the struct has a layout
            // fixed by its fields and meets the trait's contract as they do.
            unsafe impl #impl_generics #path for #ident #ty_generics #where_clause {}
        };
    })
}

/// Accepts `#[repr(C)]` and `#[repr(transparent)]`, alone or beside `align(N)` / `packed(N)`,
/// in one `repr` attribute or several; anything else is an error naming the fix.
fn check_repr(input: &DeriveInput, name: &str) -> Result<(), Error> {
    let mut fixed = false;
    for attr in input.attrs.iter().filter(|a| a.path().is_ident("repr")) {
        let metas = attr.parse_args_with(Punctuated::<Meta, Token![,]>::parse_terminated)?;
        fixed |= metas
            .iter()
            .any(|m| m.path().is_ident("C") || m.path().is_ident("transparent"));
    }
    if fixed {
        return Ok(());
    }
    Err(Error::new(
        input.ident.span(),
        format!(
            "#[derive({name})] needs a fixed layout: add #[repr(C)]: Rust's default layout may \
             differ between builds, so two processes could disagree on where a field lies"
        ),
    ))
}
