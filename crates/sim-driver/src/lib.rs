//! The simulated NVIDIA driver state (test double).
