//! Alarms (etcd's `alarmStore`): raised through raft so every member agrees; while NOSPACE
//! is active every write that could grow the database is refused.

use parking_lot::Mutex;
use proto::etcdserverpb::{AlarmMember, AlarmRequest, AlarmResponse, AlarmType, alarm_request::AlarmAction};
use rocksdb::WriteBatch;

use crate::backend::{Backend, BackendError, CF_META};

const META_ALARM_PREFIX: &[u8] = b"alarm/";

#[derive(Default)]
pub struct Alarms {
    active: Mutex<Vec<AlarmMember>>,
}

impl Alarms {
    pub fn load(backend: &Backend) -> Result<Self, BackendError> {
        Ok(Self { active: Mutex::new(load_active(backend)?) })
    }

    /// Replaces the alarms with what the backend holds (after a raft snapshot install).
    pub fn reload(&self, backend: &Backend) -> Result<(), BackendError> {
        *self.active.lock() = load_active(backend)?;
        Ok(())
    }

    pub fn list(&self) -> Vec<AlarmMember> {
        self.active.lock().clone()
    }

    pub fn is_active(&self, alarm: AlarmType) -> bool {
        self.active.lock().iter().any(|a| a.alarm == alarm as i32)
    }

    /// Applies an alarm request (from a raft entry).
    pub fn apply(&self, backend: &Backend, batch: &mut WriteBatch, req: &AlarmRequest) -> AlarmResponse {
        let mut active = self.active.lock();
        let member = AlarmMember { member_id: req.member_id, alarm: req.alarm };
        let alarms = match req.action() {
            AlarmAction::Get => active.clone(),
            AlarmAction::Activate => {
                if req.alarm == AlarmType::None as i32 {
                    Vec::new()
                } else {
                    if !active.contains(&member) {
                        batch.put_cf(backend.cf(CF_META), alarm_key(&member), []);
                        active.push(member);
                    }
                    vec![member]
                }
            }
            AlarmAction::Deactivate => match active.iter().position(|a| *a == member) {
                Some(i) => {
                    batch.delete_cf(backend.cf(CF_META), alarm_key(&member));
                    vec![active.remove(i)]
                }
                None => Vec::new(),
            },
        };
        AlarmResponse { header: None, alarms }
    }
}

fn load_active(backend: &Backend) -> Result<Vec<AlarmMember>, BackendError> {
    let mut active = Vec::new();
    backend.scan(CF_META, META_ALARM_PREFIX, |k, _| {
        let Some(rest) = k.strip_prefix(META_ALARM_PREFIX) else { return Ok(false) };
        if rest.len() != 12 {
            return Err(BackendError::Corrupt(format!("alarm key {k:?}")));
        }
        let member_id = u64::from_be_bytes(rest[..8].try_into().expect("8 bytes"));
        let alarm = i32::from_be_bytes(rest[8..].try_into().expect("4 bytes"));
        active.push(AlarmMember { member_id, alarm });
        Ok(true)
    })?;
    Ok(active)
}

fn alarm_key(m: &AlarmMember) -> Vec<u8> {
    let mut k = META_ALARM_PREFIX.to_vec();
    k.extend_from_slice(&m.member_id.to_be_bytes());
    k.extend_from_slice(&m.alarm.to_be_bytes());
    k
}
