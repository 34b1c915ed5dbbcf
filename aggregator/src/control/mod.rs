//! The adaptive controller: from complete minutes of sensed usage to the
//! factor each (resource, limit) is stamped with. [`factor`] is its law and
//! estimator, pure.

pub mod factor;
