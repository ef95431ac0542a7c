//! A fake libnvidia-ml (test double).
