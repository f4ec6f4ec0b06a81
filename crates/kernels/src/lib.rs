//! folio-kernels
