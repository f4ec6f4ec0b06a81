//! folio-model
