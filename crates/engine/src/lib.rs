//! folio-engine
