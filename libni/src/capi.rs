//! The C ABI (include/ni.h).
