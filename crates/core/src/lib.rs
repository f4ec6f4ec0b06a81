//! folio-core
