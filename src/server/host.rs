//! The store as persistence's host (`crate::persist::Host`): what a save
//! reads and a load fills, lent apart, with the function libraries going
//! out as source codes and coming back through scripting.
//!
//! Must not hold persistence logic: it lends the store's parts and forwards
//! (`Functions::restore`, `Store::drain_events`); saves and loads are
//! `crate::persist`'s.

use bytes::Bytes;

use super::Store;
use crate::persist::{Host, Libraries, Parts};
use crate::scripting::functions::{Functions, Policy};

impl Host for Store {
    #[inline]
    fn parts(&mut self) -> Parts<'_> {
        Parts {
            ks: &mut self.ks,
            config: &self.config,
            state: &mut self.persist,
            libraries: &self.scripting.functions,
            repl: &self.repl,
        }
    }

    fn restore_functions(&mut self, codes: Vec<Bytes>) -> Result<(), String> {
        let gate = self.scripting.gate.clone();
        self.scripting
            .functions
            .restore(codes, Policy::Flush, &gate)
    }

    fn settle(&mut self) {
        self.drain_events(None);
    }
}

impl Libraries for Functions {
    fn codes(&self) -> Vec<&[u8]> {
        Functions::codes(self)
    }
}
