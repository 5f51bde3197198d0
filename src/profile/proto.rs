//! The messages of pprof's `profile.proto` that a mutex profile uses, derived by hand with
//! prost (no protoc, no build script). Field numbers are those of
//! `github.com/google/pprof/proto/profile.proto` (also in Go 1.19's
//! `src/runtime/pprof/proto.go`, `tagProfile_*`); strings are indices into `string_table`,
//! whose entry 0 is `""`.

/// `perftools.profiles.Profile`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Profile {
    /// What each value of a sample is (here `contentions/count`, `delay/nanoseconds`).
    #[prost(message, repeated, tag = "1")]
    pub sample_type: Vec<ValueType>,
    /// One per distinct stack.
    #[prost(message, repeated, tag = "2")]
    pub sample: Vec<Sample>,
    /// The executable images the addresses belong to.
    #[prost(message, repeated, tag = "3")]
    pub mapping: Vec<Mapping>,
    /// Addresses, each with its (inlined) source lines.
    #[prost(message, repeated, tag = "4")]
    pub location: Vec<Location>,
    /// Functions the lines name.
    #[prost(message, repeated, tag = "5")]
    pub function: Vec<Function>,
    /// Every string of the profile, `""` first.
    #[prost(string, repeated, tag = "6")]
    pub string_table: Vec<String>,
    /// Regexp of frames to drop (string index; 0: none).
    #[prost(int64, tag = "7")]
    pub drop_frames: i64,
    /// Regexp of frames to keep (string index; 0: none).
    #[prost(int64, tag = "8")]
    pub keep_frames: i64,
    /// When the profile was written, ns since the Unix epoch.
    #[prost(int64, tag = "9")]
    pub time_nanos: i64,
    /// How long it covers, ns (0: unknown).
    #[prost(int64, tag = "10")]
    pub duration_nanos: i64,
    /// The unit of `period`.
    #[prost(message, optional, tag = "11")]
    pub period_type: Option<ValueType>,
    /// Events per sample (the mutex profile fraction).
    #[prost(int64, tag = "12")]
    pub period: i64,
    /// Free-form comments (string indices).
    #[prost(int64, repeated, tag = "13")]
    pub comment: Vec<i64>,
    /// The sample type shown by default (string index of its type).
    #[prost(int64, tag = "14")]
    pub default_sample_type: i64,
}

/// `perftools.profiles.ValueType`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ValueType {
    /// String index, e.g. `"delay"`.
    #[prost(int64, tag = "1")]
    pub r#type: i64,
    /// String index, e.g. `"nanoseconds"`.
    #[prost(int64, tag = "2")]
    pub unit: i64,
}

/// `perftools.profiles.Sample`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Sample {
    /// Location ids, leaf first.
    #[prost(uint64, repeated, tag = "1")]
    pub location_id: Vec<u64>,
    /// One value per `sample_type`.
    #[prost(int64, repeated, tag = "2")]
    pub value: Vec<i64>,
}

/// `perftools.profiles.Mapping`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Mapping {
    /// Non-zero id.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// First address of the image.
    #[prost(uint64, tag = "2")]
    pub memory_start: u64,
    /// Address past its end.
    #[prost(uint64, tag = "3")]
    pub memory_limit: u64,
    /// File offset of `memory_start`.
    #[prost(uint64, tag = "4")]
    pub file_offset: u64,
    /// String index of the image's path.
    #[prost(int64, tag = "5")]
    pub filename: i64,
    /// String index of its build id.
    #[prost(int64, tag = "6")]
    pub build_id: i64,
    /// Locations have function names (pprof need not symbolise).
    #[prost(bool, tag = "7")]
    pub has_functions: bool,
    /// They have file names.
    #[prost(bool, tag = "8")]
    pub has_filenames: bool,
    /// They have line numbers.
    #[prost(bool, tag = "9")]
    pub has_line_numbers: bool,
    /// They list inlined frames.
    #[prost(bool, tag = "10")]
    pub has_inline_frames: bool,
}

/// `perftools.profiles.Location`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Location {
    /// Non-zero id.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// Its mapping's id.
    #[prost(uint64, tag = "2")]
    pub mapping_id: u64,
    /// The (return) address.
    #[prost(uint64, tag = "3")]
    pub address: u64,
    /// Source lines, innermost inlined function first, the function the address is in last.
    #[prost(message, repeated, tag = "4")]
    pub line: Vec<Line>,
}

/// `perftools.profiles.Line`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Line {
    /// Its function's id.
    #[prost(uint64, tag = "1")]
    pub function_id: u64,
    /// Line number (0: unknown).
    #[prost(int64, tag = "2")]
    pub line: i64,
}

/// `perftools.profiles.Function`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Function {
    /// Non-zero id.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// String index of the demangled name.
    #[prost(int64, tag = "2")]
    pub name: i64,
    /// String index of the symbol name.
    #[prost(int64, tag = "3")]
    pub system_name: i64,
    /// String index of the source file.
    #[prost(int64, tag = "4")]
    pub filename: i64,
    /// Line the function starts at (0: unknown).
    #[prost(int64, tag = "5")]
    pub start_line: i64,
}
