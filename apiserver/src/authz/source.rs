//! The objects the authorizers read: a resource's watch cache in the server, a list in
//! memory in tests. Authorizers keep indexes derived from these and rebuild them when the
//! revision moves, so a request costs a lookup, not a decode of every object.

use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;
use serde_json::Value;

use crate::cacher::Filter;
use crate::registry::store::Store;
use crate::selectors::FieldSelector;

/// A collection of objects of one resource.
pub trait Source: Send + Sync {
    /// Changes whenever the collection may have changed.
    fn revision(&self) -> i64;
    /// The objects (JSON), all of them or those whose selectable `field` equals the value.
    fn objects(&self, field: Option<(&str, &str)>) -> Vec<Bytes>;
}

/// A watch cache.
pub struct CacheSource(pub Arc<Store>);

impl Source for CacheSource {
    fn revision(&self) -> i64 {
        self.0.cacher.rv()
    }

    fn objects(&self, field: Option<(&str, &str)>) -> Vec<Bytes> {
        let mut filter = Filter::default();
        if let Some((f, v)) = field {
            match FieldSelector::parse(&format!("{f}={v}"), &[f]) {
                Ok(sel) => filter.fields = sel,
                Err(_) => return Vec::new(),
            }
        }
        let (items, _, _) = self.0.cacher.list(&filter, None, 0);
        items.iter().map(|o| o.json.clone()).collect()
    }
}

/// Objects held in memory, for tests (and a source for a resource this server lacks).
#[derive(Default)]
pub struct MemSource {
    state: Mutex<(i64, Vec<Value>)>,
}

impl MemSource {
    pub fn new(objects: Vec<Value>) -> Arc<Self> {
        Arc::new(Self { state: Mutex::new((1, objects)) })
    }

    /// Replaces the objects and moves the revision.
    pub fn set(&self, objects: Vec<Value>) {
        let mut st = self.state.lock();
        st.0 += 1;
        st.1 = objects;
    }
}

impl Source for MemSource {
    fn revision(&self) -> i64 {
        self.state.lock().0
    }

    fn objects(&self, field: Option<(&str, &str)>) -> Vec<Bytes> {
        let st = self.state.lock();
        st.1.iter()
            .filter(|o| {
                field.is_none_or(|(f, v)| {
                    let got = f.split('.').fold(*o, |cur, k| &cur[k]);
                    got.as_str().unwrap_or_default() == v
                })
            })
            .map(|o| Bytes::from(serde_json::to_vec(o).unwrap_or_default()))
            .collect()
    }
}

/// A value derived from a source, rebuilt when the source's revision moves.
pub struct Derived<T> {
    source: Arc<dyn Source>,
    build: fn(&[Bytes]) -> T,
    state: Mutex<Option<(i64, Arc<T>)>>,
}

impl<T> Derived<T> {
    pub fn new(source: Arc<dyn Source>, build: fn(&[Bytes]) -> T) -> Self {
        Self { source, build, state: Mutex::new(None) }
    }

    /// The value for the source as it is now. The revision is read before the objects, so
    /// a change racing the rebuild only causes another rebuild, never a stale answer.
    pub fn get(&self) -> Arc<T> {
        let rev = self.source.revision();
        let mut st = self.state.lock();
        if let Some((r, v)) = &*st
            && *r == rev
        {
            return v.clone();
        }
        let v = Arc::new((self.build)(&self.source.objects(None)));
        *st = Some((rev, v.clone()));
        v
    }
}
