//! libni: the NI user-space driver (in progress).
