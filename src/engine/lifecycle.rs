//! Creating, removing, starting, stopping and re-persisting devices. Each operation claims its
//! UUID, records an intent before touching the host, takes the GPU's lock while it changes the
//! GPU, persists the result, and closes the intent last.

use std::collections::BTreeMap;

use super::admission::Reserve;
use super::pci_devices::{Making, Outcome};
use super::request::shorten;
use super::{
    libc_errno, lock, CreateRequest, DeviceInfo, Engine, EngineError, EngineResult, ModifyRequest,
    Refusal,
};
use crate::demand::record::Note;
use crate::discovery;
use crate::model::{DeviceKind, MdevDevice, MdevType, SharingMode, PASSTHROUGH_TYPE};
use crate::persist::intent::{self, Intent, Operation};
use crate::persist::{self, mdevctl, state};

/// The attribute NVIDIA vGPU parameters are written to.
pub(super) const VGPU_PARAMS: &str = "nvidia/vgpu_params";

pub(super) enum Attempt {
    Created(MdevDevice),
    Refused(String),
}

/// An intent vgpud recorded before changing the host: closed when dropped, so no return path
/// can forget it, unless [`IntentGuard::keep_open`] leaves it for the next start's replay
/// to finish (a removal whose files could not be deleted, say).
#[must_use = "the intent closes when this is dropped"]
pub(super) struct IntentGuard<'a> {
    engine: &'a Engine,
    uuid: String,
    close: bool,
}

impl IntentGuard<'_> {
    /// Leaves the intent open: the work it names is half done, and the replay at the next
    /// start finishes or undoes it.
    pub(super) fn keep_open(mut self) {
        self.close = false;
    }
}

impl Drop for IntentGuard<'_> {
    fn drop(&mut self) {
        if self.close {
            self.engine.close_intent(&self.uuid);
        }
    }
}

/// What trying one GPU for a create came to.
enum Tried {
    Made(DeviceInfo),
    Refused(String),
}

impl Engine {
    /// Records an intent that the caller's [`IntentGuard`] (from [`Engine::intent_guard`])
    /// closes: for steps that an operation of the caller runs.
    pub(super) fn record_intent(&self, uuid: &str, operation: Operation) -> EngineResult<()> {
        intent::open(
            &self.host,
            &Intent {
                version: intent::VERSION,
                uuid: uuid.to_string(),
                started: persist::now_unix(),
                operation,
            },
        )
        .map_err(|e| EngineError::persist(format!("recording the intent for {uuid}"), e))
    }

    /// Records an intent, closed when the guard is dropped.
    pub(super) fn open_intent(
        &self,
        uuid: &str,
        operation: Operation,
    ) -> EngineResult<IntentGuard<'_>> {
        self.record_intent(uuid, operation)?;
        Ok(self.intent_guard(uuid))
    }

    /// A guard that closes whatever intent is open for `uuid` when dropped (none: nothing),
    /// for an operation whose steps record the intent themselves.
    pub(super) fn intent_guard(&self, uuid: &str) -> IntentGuard<'_> {
        IntentGuard {
            engine: self,
            uuid: uuid.to_string(),
            close: true,
        }
    }

    fn close_intent(&self, uuid: &str) {
        // A close that fails leaves an intent whose replay finds the work done: harmless.
        if let Err(e) = intent::close(&self.host, uuid) {
            tracing::error!(%uuid, error = %e, "could not close an intent");
        }
    }

    /// Creates a device of the requested type on a GPU that can take it.
    ///
    /// Requests for one type are admitted first come, first served (a FIFO per type), so an
    /// earlier request never loses to a later one; different types proceed in parallel. Each
    /// GPU is tried under its own lock; the definition and record are written after the lock
    /// is released, so the GPU serves the next request while the disk syncs.
    pub fn create_device(&self, req: &CreateRequest) -> EngineResult<DeviceInfo> {
        let req = &req.clone().normalized()?;
        req.validate()?;
        if let Some(existing) = self.existing_for(req)? {
            return Ok(existing);
        }
        // Demand is counted under the type the request resolves to first (the id of the type
        // on the GPU placement tries first), so a request and its outcome share a key.
        let (key, made) = if req.type_query.eq_ignore_ascii_case(PASSTHROUGH_TYPE) {
            (PASSTHROUGH_TYPE.to_string(), self.create_passthrough(req))
        } else {
            let candidates = self.candidates(req)?;
            let Some(first) = candidates.first() else {
                return self.create_on(req, &candidates);
            };
            let key = first.1.id.clone();
            if let Some(pool) = &req.pool {
                if let Some(spare) = self.take_spare(req, pool, &candidates)? {
                    self.demand.note(&key, Note::Request);
                    let served = match req.lease_s {
                        Some(lease) => self.give_lease(spare, lease),
                        None => Ok(spare),
                    };
                    if served.is_ok() {
                        self.demand.note(&key, Note::Warm);
                    }
                    return served;
                }
            }
            let mut made = self.create_on(req, &candidates);
            if !req.stocking_pool && matches!(made, Err(EngineError::NoCapacity { .. })) {
                if let Some(_held) = self.make_room(req, &candidates) {
                    made = self.create_on(req, &candidates);
                }
            }
            (key, made)
        };
        let made = match (made, req.lease_s) {
            (Ok(info), Some(lease)) => self.give_lease(info, lease),
            (made, _) => made,
        };
        if req.stocking_pool {
            return made;
        }
        self.demand.note(&key, Note::Request);
        match &made {
            Ok(_) => self.demand.note(&key, Note::Cold),
            Err(EngineError::NoCapacity { .. }) => self.demand.note(&key, Note::Refused),
            Err(_) => {}
        }
        made
    }

    /// Creates a device of the request's type on the first of `candidates` that takes it.
    fn create_on(
        &self,
        req: &CreateRequest,
        candidates: &[(String, MdevType)],
    ) -> EngineResult<DeviceInfo> {
        let uuid = match &req.uuid {
            Some(u) => u.clone(),
            None => uuid::Uuid::new_v4().to_string(),
        };
        let claim = self.claim(&uuid, true)?;
        // A host with no room says so at once, without touching the disk.
        let open = self.candidates_with_room(candidates, req)?;
        // The intent is made durable before the turn is taken, so the disk waits of
        // concurrent creates overlap (and the file system commits them together).
        let intent = self.open_intent(
            &uuid,
            Operation::Create {
                parent: None,
                type_id: None,
                owner: req.owner.clone(),
                params: req.params.clone(),
                persistent: req.persistent,
                autostart: req.autostart,
            },
        )?;
        let admission = self.admission(candidates, req.parent.as_deref());
        let mut turn = Some(admission.wait_turn());
        let mut refusals = Vec::new();
        // Two passes: the second looks again, exactly and under their lock, at the GPUs whose
        // room other requests had reserved when the first looked, before a refusal.
        let mut pass = open;
        let mut second_look = false;
        loop {
            let mut reserved_full: Vec<&(String, MdevType)> = Vec::new();
            for candidate in pass {
                let (parent, ty) = (&candidate.0, &candidate.1);
                let Some(gpu_lock) = self.gpu_lock(parent) else {
                    continue;
                };
                if turn.is_none() {
                    turn = Some(admission.wait_turn());
                }
                // A GPU that is its own mdev parent takes a reservation of its room while this
                // request has the turn, and the turn passes on before the create, so the next
                // request of the type goes ahead on another GPU meanwhile (first come, first
                // served, and no GPU promised twice).
                let reservation = if second_look {
                    None
                } else {
                    match self.reserve_room(parent, ty)? {
                        Reserve::Reserved(r) => {
                            turn = None;
                            Some(r)
                        }
                        Reserve::Taken => {
                            reserved_full.push(candidate);
                            continue;
                        }
                        Reserve::NotReservable => None,
                    }
                };
                let held = lock(&gpu_lock);
                if second_look && !self.unreserved_room(parent, ty)? {
                    refusals.push(Refusal {
                        gpu: parent.clone(),
                        reason: self.why_full(parent, ty),
                    });
                    continue;
                }
                let tried = if self.offers_sriov_vgpu(parent) {
                    let tried = self.create_sriov_vgpu_on(parent, ty, &uuid, req);
                    drop(held);
                    tried?
                } else {
                    // The kernel's count says it once the create is done: the reservation
                    // and the lock go then, and the turn once it succeeded.
                    let attempt = self.try_create_on(parent, ty, &uuid, req)?;
                    drop(reservation);
                    drop(held);
                    match attempt {
                        Attempt::Created(dev) => {
                            turn = None;
                            Tried::Made(self.persist_mdev(parent, &uuid, dev, req)?)
                        }
                        Attempt::Refused(reason) => Tried::Refused(reason),
                    }
                };
                match tried {
                    Tried::Made(info) => {
                        drop(turn);
                        drop(intent);
                        claim.finish(Some(info.clone()));
                        return Ok(info);
                    }
                    Tried::Refused(reason) => refusals.push(Refusal {
                        gpu: parent.clone(),
                        reason,
                    }),
                }
            }
            if second_look || reserved_full.is_empty() {
                break;
            }
            second_look = true;
            pass = reserved_full;
        }
        drop(intent);
        Err(EngineError::NoCapacity {
            type_query: req.type_query.clone(),
            refusals,
        })
    }

    /// The candidates from the first that has room now on (the ones before it are left out;
    /// from it on, each is tried under its lock), or `NoCapacity` with every GPU's reason.
    fn candidates_with_room<'c>(
        &self,
        candidates: &'c [(String, MdevType)],
        req: &CreateRequest,
    ) -> EngineResult<Vec<&'c (String, MdevType)>> {
        // Why a GPU is full is worked out only when none has room: a create that finds room
        // on its third GPU does not explain the first two.
        let mut explain = false;
        loop {
            let mut refusals = Vec::new();
            for (i, candidate) in candidates.iter().enumerate() {
                match self.room_for(&candidate.0, &candidate.1, req.create_instance, explain)? {
                    None => return Ok(candidates[i..].iter().collect()),
                    Some(reason) => refusals.push(Refusal {
                        gpu: candidate.0.clone(),
                        reason,
                    }),
                }
            }
            if explain {
                return Err(EngineError::NoCapacity {
                    type_query: req.type_query.clone(),
                    refusals,
                });
            }
            explain = true;
        }
    }

    /// Gives a free VF of an SR-IOV GPU the vGPU type, under the GPU's lock (the caller's).
    /// A MIG-backed type needs a free GPU instance of its profile: one is made for it when
    /// none is (and destroyed with the device, or at once when the VF is refused).
    fn create_sriov_vgpu_on(
        &self,
        parent: &str,
        ty: &MdevType,
        uuid: &str,
        req: &CreateRequest,
    ) -> EngineResult<Tried> {
        let made_instance = match sriov_type_number(ty)
            .map(|n| self.instance_for_vgpu(parent, n, req.create_instance))
            .transpose()
        {
            Ok(made) => made.flatten(),
            Err(e) => return Ok(Tried::Refused(e.to_string())),
        };
        let assigned = self.assign_vf(parent, ty, &Making::from_request(uuid, req));
        match (&assigned, &made_instance) {
            (Ok(Outcome::Made(info)), Some(made)) => {
                self.record_instance_for(parent, made, uuid);
                self.refresh_nvidia_making(parent, info);
            }
            (Ok(Outcome::Made(info)), None) => {
                if self
                    .mig_profile_of_type(parent, sriov_type_number(ty).unwrap_or(0))
                    .is_some()
                {
                    self.refresh_nvidia_making(parent, info);
                }
            }
            (_, Some(made)) => self.drop_instance(parent, made),
            (_, None) => {}
        }
        Ok(match assigned? {
            Outcome::Made(info) => Tried::Made(info),
            Outcome::Refused(reason) => Tried::Refused(reason),
        })
    }

    /// Persists an mdev just made; when that fails the device is removed again (under its
    /// GPU's lock) and its files forgotten, so nothing half-made stays.
    fn persist_mdev(
        &self,
        parent: &str,
        uuid: &str,
        dev: MdevDevice,
        req: &CreateRequest,
    ) -> EngineResult<DeviceInfo> {
        let mdev_parent = dev.parent.clone();
        self.persist_created(dev, req).inspect_err(|_| {
            let gpu_lock = self.gpu_lock(parent);
            let _held = gpu_lock.as_ref().map(|l| lock(l));
            self.undo_create(uuid);
            self.forget_persisted(&mdev_parent, uuid);
        })
    }

    /// With `exist_ok`: the device the request names, if it exists with the type asked for
    /// (started first if it is defined but not active). A device of another type is
    /// `Exists`, with the type it has.
    fn existing_for(&self, req: &CreateRequest) -> EngineResult<Option<DeviceInfo>> {
        let (true, Some(uuid)) = (req.exist_ok, &req.uuid) else {
            return Ok(None);
        };
        let Some(info) = self.device(uuid) else {
            return Ok(None);
        };
        let same_type = if info.kind == DeviceKind::Passthrough {
            req.type_query.eq_ignore_ascii_case(PASSTHROUGH_TYPE)
                && req
                    .parent
                    .as_ref()
                    .is_none_or(|p| info.address.as_ref() == Some(p) || info.parent == *p)
        } else {
            let gpu = self.gpu_of_parent(&info.parent);
            let known = self.with_gpu(&gpu, |g| {
                g.types
                    .iter()
                    .any(|t| t.id == info.type_id && t.matches(&req.type_query))
            });
            known.unwrap_or(false)
                || info.type_id.eq_ignore_ascii_case(&req.type_query)
                || info.type_name.eq_ignore_ascii_case(&req.type_query)
        };
        if !same_type {
            return Err(EngineError::Exists(format!(
                "device {uuid} exists with type {} ({}), not {:?}",
                info.type_id,
                info.type_name,
                shorten(&req.type_query)
            )));
        }
        if info.active {
            return Ok(Some(info));
        }
        self.start_device(uuid).map(Some)
    }

    /// `None` when a GPU has room for one more of a type now, else why not (an empty reason
    /// unless `explain`).
    fn room_for(
        &self,
        gpu: &str,
        ty: &MdevType,
        create_instance: bool,
        explain: bool,
    ) -> EngineResult<Option<String>> {
        if self.offers_sriov_vgpu(gpu) {
            let Some(number) = crate::discovery::sriov::nvidia_type_number(&ty.id) else {
                return Ok(Some(format!("{} is not an NVIDIA vGPU type", ty.id)));
            };
            let states = self.vf_states(gpu)?;
            let free = states
                .iter()
                .any(|s| s.current == 0 && s.creatable.iter().any(|c| c.id == number));
            // A MIG-backed type fits where a VF is free and a GPU instance could be made.
            if !free {
                if let Some(room) = self.mig_room(gpu, number, create_instance) {
                    let vf_free = states.iter().any(|s| s.current == 0);
                    if room > 0 && vf_free {
                        return Ok(None);
                    }
                    if room == 0 {
                        return Ok(Some(if explain {
                            self.why_no_instance(gpu, number, create_instance)
                        } else {
                            String::new()
                        }));
                    }
                }
            }
            return Ok((!free).then(|| {
                if explain {
                    self.why_vfs_full(gpu, ty, &states)
                } else {
                    String::new()
                }
            }));
        }
        Ok(match self.free_mdev_parent(gpu, &ty.id)? {
            Some(_) => None,
            None if explain => Some(self.why_full(gpu, ty)),
            None => Some(String::new()),
        })
    }

    /// Moves a GPU or VF to vfio-pci for one guest (type "passthrough", option "parent").
    fn create_passthrough(&self, req: &CreateRequest) -> EngineResult<DeviceInfo> {
        let Some(address) = &req.parent else {
            return Err(EngineError::InvalidArgument(
                "a passthrough device needs option \"parent\": the address of the GPU or VF to give"
                    .into(),
            ));
        };
        if req.params.is_some() {
            return Err(EngineError::InvalidArgument(
                "option \"params\" applies to NVIDIA vGPUs, not to passthrough".into(),
            ));
        }
        let function = self.pci_function(address)?;
        if function.class >> 16 != 0x03 {
            return Err(EngineError::InvalidArgument(format!(
                "{address} is no GPU (PCI class {:06x}); vgpud passes through GPUs and their VFs",
                function.class
            )));
        }
        let pf = function
            .physical_function
            .clone()
            .unwrap_or_else(|| address.clone());
        let gpu_lock = self
            .gpu_lock(&pf)
            .ok_or_else(|| EngineError::NotFound(format!("no GPU {pf} on this host")))?;
        let uuid = match &req.uuid {
            Some(u) => u.clone(),
            None => uuid::Uuid::new_v4().to_string(),
        };
        let claim = self.claim(&uuid, true)?;
        let held = lock(&gpu_lock);
        // One passthrough device per function: a stopped one keeps its claim, else starting
        // it would find the function already on vfio-pci and two devices would hold it.
        let defined = lock(&self.registry)
            .devices
            .values()
            .find(|d| {
                d.kind == DeviceKind::Passthrough
                    && (d.address.as_deref() == Some(address.as_str())
                        || d.functions.iter().any(|f| f.address == *address))
            })
            .map(|d| (d.uuid.clone(), d.active));
        if let Some((other, active)) = defined {
            return Err(EngineError::Busy(format!(
                "{address} is passthrough device {other} already ({}); {}",
                if active {
                    "active"
                } else {
                    "defined, not active"
                },
                if active {
                    "remove it first"
                } else {
                    "start it (StartDevice) or remove it first"
                }
            )));
        }
        let intent = self.intent_guard(&uuid);
        let result = self.assign_passthrough(address, req.force, &Making::from_request(&uuid, req));
        drop(held);
        drop(intent);
        let info = result?;
        claim.finish(Some(info.clone()));
        Ok(info)
    }

    /// Whether a GPU shares through NVIDIA vGPU on SR-IOV virtual functions.
    pub(super) fn offers_sriov_vgpu(&self, address: &str) -> bool {
        self.with_gpu(address, |g| {
            g.sharing_modes.contains(&SharingMode::SriovVgpu)
        })
        .unwrap_or(false)
    }

    /// Writes the definition (if persistent) and vgpud's record of a device just created.
    fn persist_created(&self, dev: MdevDevice, req: &CreateRequest) -> EngineResult<DeviceInfo> {
        self.persist_new(
            dev,
            &req.owner,
            req.params.as_deref(),
            req.persistent,
            req.autostart,
        )
    }

    /// Writes the definition (if persistent) and the record of a device that exists.
    pub(super) fn persist_new(
        &self,
        dev: MdevDevice,
        owner: &str,
        params: Option<&str>,
        persistent: bool,
        autostart: bool,
    ) -> EngineResult<DeviceInfo> {
        let definition = persistent.then(|| mdevctl::Definition {
            parent: dev.parent.clone(),
            uuid: dev.uuid.clone(),
            mdev_type: dev.type_id.clone(),
            autostart,
            attrs: params
                .iter()
                .map(|p| (VGPU_PARAMS.to_string(), p.to_string()))
                .collect(),
        });
        let info = DeviceInfo {
            type_name: self.type_name(&dev.parent, &dev.type_id),
            uuid: dev.uuid,
            parent: dev.parent,
            type_id: dev.type_id,
            owner: owner.to_string(),
            iommu_group: dev.iommu_group,
            attributes: dev.attributes,
            active: true,
            persistent,
            autostart: persistent && autostart,
            created: persist::now_unix(),
            kind: DeviceKind::Mdev,
            address: None,
            functions: Vec::new(),
        };
        // The definition and the record are one commit of the journal, whose wait for the
        // disk concurrent creates share.
        let mut files: Vec<persist::FileWrite> = definition
            .iter()
            .map(|d| mdevctl::file(&self.host, d))
            .collect();
        files.push(state::file(
            &self.host,
            &record_of(&info, params.map(str::to_string)),
        ));
        persist::commit(&self.host, &files, &[]).map_err(|e| {
            EngineError::persist(format!("defining and recording {}", info.uuid), e)
        })?;
        Ok(info)
    }

    /// Removes a definition and record, logging failures (used on the way out of an error).
    fn forget_persisted(&self, parent: &str, uuid: &str) {
        if let Err(e) = mdevctl::remove(&self.host, parent, uuid) {
            tracing::error!(%uuid, error = %e, "could not remove a definition");
        }
        if let Err(e) = state::remove(&self.host, uuid) {
            tracing::error!(%uuid, error = %e, "could not remove a record");
        }
    }

    /// One attempt on one GPU, with its lock held.
    fn try_create_on(
        &self,
        parent: &str,
        ty: &MdevType,
        uuid: &str,
        req: &CreateRequest,
    ) -> EngineResult<Attempt> {
        let Some(mdev_parent) = self.free_mdev_parent(parent, &ty.id)? else {
            return Ok(Attempt::Refused(self.why_full(parent, ty)));
        };
        let parent = mdev_parent.as_str();
        if let Err(e) = self.write_create(parent, &ty.id, uuid) {
            return match e {
                EngineError::NoCapacity { refusals, .. } => Ok(Attempt::Refused(
                    refusals.into_iter().map(|r| r.reason).collect(),
                )),
                other => Err(other),
            };
        }
        let attrs: Vec<(String, String)> = req
            .params
            .iter()
            .map(|p| (VGPU_PARAMS.to_string(), p.clone()))
            .collect();
        if let Err(e) = self.write_attrs(uuid, &attrs) {
            self.undo_create(uuid);
            return Err(e);
        }
        self.read_back(uuid).map(Attempt::Created)
    }

    /// Writes the UUID to the type's `create`, mapping the kernel's refusals.
    fn write_create(&self, parent: &str, type_id: &str, uuid: &str) -> EngineResult<()> {
        let create = discovery::mdev_type_dir(&self.host, parent, type_id).join("create");
        let Err(e) = self.host.write_attr(&create, uuid) else {
            return Ok(());
        };
        let refused = |reason: String| EngineError::NoCapacity {
            type_query: type_id.to_string(),
            refusals: vec![Refusal {
                gpu: parent.to_string(),
                reason,
            }],
        };
        Err(match e.errno() {
            Some(
                libc_errno::ENOSPC | libc_errno::EUSERS | libc_errno::EBUSY | libc_errno::EAGAIN,
            ) => refused(format!("the driver refused a {type_id} ({e})")),
            Some(libc_errno::ENODEV) => refused(format!("the GPU went away ({e})")),
            Some(libc_errno::EEXIST) => {
                EngineError::Exists(format!("device {uuid} already exists ({e})"))
            }
            Some(libc_errno::EINVAL) => {
                EngineError::InvalidArgument(format!("the kernel rejected device {uuid} ({e})"))
            }
            _ => EngineError::host(format!("creating {uuid} on {parent}"), e),
        })
    }

    /// Writes attributes in order, as mdevctl does after a create.
    fn write_attrs(&self, uuid: &str, attrs: &[(String, String)]) -> EngineResult<()> {
        let dir = discovery::mdev_device_dir(&self.host, uuid);
        for (key, value) in attrs {
            if key.split('/').any(|part| part.is_empty() || part == "..") {
                return Err(EngineError::InvalidArgument(format!(
                    "attribute {key:?} of {uuid} is not a path below the device"
                )));
            }
            self.host.write_attr(&dir.join(key), value).map_err(|e| {
                EngineError::InvalidArgument(format!(
                    "the driver rejected {key}={value:?} for {uuid}, so the device was not kept ({e})"
                ))
            })?;
        }
        Ok(())
    }

    fn read_back(&self, uuid: &str) -> EngineResult<MdevDevice> {
        match discovery::read_device(&self.host, uuid) {
            Ok(Some(dev)) => Ok(dev),
            Ok(None) => Err(EngineError::host(
                format!("reading back {uuid}"),
                crate::host::HostError::Parse {
                    path: discovery::mdev_device_dir(&self.host, uuid),
                    reason: "the device did not appear after create".into(),
                },
            )),
            Err(e) => {
                self.undo_create(uuid);
                Err(EngineError::host(format!("reading back {uuid}"), e))
            }
        }
    }

    pub(super) fn undo_create(&self, uuid: &str) {
        if let Err(e) = self.write_remove(uuid) {
            tracing::error!(%uuid, error = %e, "could not remove a half-made device");
        }
    }

    pub(super) fn write_remove(&self, uuid: &str) -> EngineResult<()> {
        let remove = discovery::mdev_device_dir(&self.host, uuid).join("remove");
        self.host
            .write_attr(&remove, "1")
            .map_err(|e| match e.errno() {
                Some(libc_errno::EBUSY) => {
                    EngineError::Busy(format!("device {uuid} is in use ({e})"))
                }
                Some(libc_errno::ENOENT) => {
                    EngineError::NotFound(format!("device {uuid} vanished ({e})"))
                }
                _ => EngineError::host(format!("removing {uuid}"), e),
            })
    }

    /// Looks a device up for an operation on it: the registry, else the host.
    pub(super) fn known(&self, uuid: &str) -> EngineResult<DeviceInfo> {
        if let Some(d) = self.device(uuid) {
            return Ok(d);
        }
        let dev = discovery::read_device(&self.host, uuid)
            .map_err(|e| EngineError::host(format!("reading {uuid}"), e))?
            .ok_or_else(|| EngineError::NotFound(format!("no device {uuid} on this host")))?;
        Ok(self.describe_active(dev, None))
    }

    /// Removes a device by UUID: stops it if active and deletes its definition and record.
    /// The device counts as released in the demand record (a spare removed with
    /// [`Engine::remove_spare`] does not: it was never handed out). A device that a pool of
    /// the active layout takes back (`keep_released`, see [`super::Reshaper`]) is reset and
    /// kept as that pool's spare instead ([`Engine::return_to_pool`]), and counted as
    /// released all the same.
    pub fn remove_device(&self, uuid: &str) -> EngineResult<DeviceInfo> {
        let uuid = super::request::parse_uuid(uuid)?;
        if let Some(kept) = self.return_to_pool(&uuid)? {
            self.demand.note(&kept.type_id, Note::Released);
            return Ok(kept);
        }
        self.remove_counted(&uuid, None)
    }

    /// Removes a device by UUID as [`Engine::remove_device`] does, never keeping it for a
    /// pool (the undo of a create).
    pub(super) fn remove_unkept(&self, uuid: &str) -> EngineResult<DeviceInfo> {
        self.remove_counted(uuid, None)
    }

    /// Removes a pool's spare: only if its owner is still `owner`, looked at under the
    /// device's claim (a spare handed out since it was planned away is the caller's now:
    /// `Busy`). What layouts and pools remove goes through here.
    pub fn remove_spare(&self, uuid: &str, owner: &str) -> EngineResult<DeviceInfo> {
        self.remove_counted(uuid, Some(owner))
    }

    fn remove_counted(&self, uuid: &str, owner: Option<&str>) -> EngineResult<DeviceInfo> {
        let removed = self.remove(uuid, owner);
        if let Ok(info) = &removed {
            if owner.is_none() {
                self.demand.note(&info.type_id, Note::Released);
            }
            self.forget_lease(&info.uuid);
        }
        removed
    }

    fn remove(&self, uuid: &str, owner: Option<&str>) -> EngineResult<DeviceInfo> {
        let uuid = super::request::parse_uuid(uuid)?;
        let claim = self.claim(&uuid, false)?;
        let info = self.known(&uuid)?;
        if let Some(owner) = owner.filter(|o| *o != info.owner) {
            let now = match info.owner.as_str() {
                "" => "it has no owner now".to_string(),
                other => format!("{other} holds it now"),
            };
            return Err(EngineError::Busy(format!(
                "device {uuid} is no longer {owner}'s: {now}"
            )));
        }
        if info.kind != DeviceKind::Mdev {
            let intent = self.intent_guard(&uuid);
            if let Err(e) = self.release_pci(&info, false) {
                // A release that failed half-way is finished by the next start's replay.
                intent.keep_open();
                return Err(e);
            }
            if info.kind == DeviceKind::SriovVgpu {
                self.release_instance_of(&info.parent, &uuid);
            }
            self.mark_stopped(&uuid, false);
            if let Err(e) = state::remove(&self.host, &uuid) {
                // The intent stays open: the next start finishes the removal.
                intent.keep_open();
                return Err(EngineError::persist(format!("forgetting {uuid}"), e));
            }
            drop(intent);
            claim.finish(None);
            return Ok(DeviceInfo {
                active: false,
                persistent: false,
                autostart: false,
                ..info
            });
        }
        let intent = self.open_intent(
            &uuid,
            Operation::Remove {
                parent: info.parent.clone(),
            },
        )?;
        let active = discovery::mdev_device_dir(&self.host, &uuid).exists();
        if active {
            let gpu_lock = self.gpu_lock(&info.parent);
            let _held = gpu_lock.as_ref().map(|l| lock(l));
            self.write_remove(&uuid)?;
        }
        // Both files go in one commit of the journal.
        let undefine = persist::commit(
            &self.host,
            &[],
            &[
                mdevctl::path(&self.host, &info.parent, &uuid),
                state::path(&self.host, &uuid),
            ],
        );
        if let Err(e) = undefine {
            // The intent stays open: the next start finishes the removal.
            intent.keep_open();
            return Err(EngineError::persist(format!("undefining {uuid}"), e));
        }
        drop(intent);
        self.mark_stopped(&uuid, false);
        claim.finish(None);
        Ok(DeviceInfo {
            active: false,
            persistent: false,
            autostart: false,
            ..info
        })
    }

    /// Starts a defined, inactive device from its definition (as `mdevctl start`).
    pub fn start_device(&self, uuid: &str) -> EngineResult<DeviceInfo> {
        let uuid = super::request::parse_uuid(uuid)?;
        let claim = self.claim(&uuid, false)?;
        let info = self.known(&uuid)?;
        if info.active {
            return Err(EngineError::Exists(format!(
                "device {uuid} is already active"
            )));
        }
        let started = self.start_defined(&info)?;
        self.mark_stopped(&uuid, false);
        claim.finish(Some(started.clone()));
        Ok(started)
    }

    /// Starts a defined device; the caller holds its claim.
    pub(super) fn start_defined(&self, info: &DeviceInfo) -> EngineResult<DeviceInfo> {
        if info.kind != DeviceKind::Mdev {
            let started = self.start_pci(info);
            // Which GPU instance a MIG-backed vGPU went into is NVML's to say.
            if self.is_mig_backed(info) {
                self.refresh_nvidia(&info.parent, false);
            }
            return started;
        }
        let uuid = &info.uuid;
        let attrs: Vec<(String, String)> = self.definition_attrs(info);
        let gpu_lock = self.gpu_lock(&info.parent).ok_or_else(|| {
            EngineError::NotFound(format!(
                "the parent {} of device {uuid} is not on this host now",
                info.parent
            ))
        })?;
        let _held = lock(&gpu_lock);
        let type_dir = discovery::mdev_type_dir(&self.host, &info.parent, &info.type_id);
        if !type_dir.is_dir() {
            return Err(EngineError::NotFound(format!(
                "GPU {} does not offer type {} now",
                info.parent, info.type_id
            )));
        }
        if self.available(&info.parent, &info.type_id)? == 0 {
            return Err(EngineError::NoCapacity {
                type_query: info.type_id.clone(),
                refusals: vec![Refusal {
                    gpu: info.parent.clone(),
                    reason: format!("no {} available", info.type_name),
                }],
            });
        }
        let intent = self.open_intent(
            uuid,
            Operation::Start {
                parent: info.parent.clone(),
            },
        )?;
        let result = self
            .write_create(&info.parent, &info.type_id, uuid)
            .and_then(|()| match self.write_attrs(uuid, &attrs) {
                Ok(()) => self.read_back(uuid),
                Err(e) => {
                    self.undo_create(uuid);
                    Err(e)
                }
            });
        drop(intent);
        let dev = result?;
        Ok(DeviceInfo {
            iommu_group: dev.iommu_group,
            attributes: dev.attributes,
            active: true,
            ..info.clone()
        })
    }

    /// Starts a recorded SR-IOV vGPU (on any free VF) or passthrough device.
    fn start_pci(&self, info: &DeviceInfo) -> EngineResult<DeviceInfo> {
        let gpu_lock = self.gpu_lock(&info.parent).ok_or_else(|| {
            EngineError::NotFound(format!(
                "the GPU {} of device {} is not on this host now",
                info.parent, info.uuid
            ))
        })?;
        // The steps record the intent; it closes on every way out, a refused VF included.
        let intent = self.intent_guard(&info.uuid);
        let held = lock(&gpu_lock);
        let making = Making::from_info(info);
        let result = match info.kind {
            DeviceKind::SriovVgpu => {
                let ty = self
                    .gpu(&info.parent)
                    .and_then(|g| g.types.into_iter().find(|t| t.id == info.type_id))
                    .ok_or_else(|| {
                        EngineError::NotFound(format!(
                            "GPU {} does not offer type {} now",
                            info.parent, info.type_id
                        ))
                    })?;
                match self.assign_vf(&info.parent, &ty, &making)? {
                    Outcome::Made(started) => Ok(started),
                    Outcome::Refused(reason) => Err(EngineError::NoCapacity {
                        type_query: info.type_id.clone(),
                        refusals: vec![Refusal {
                            gpu: info.parent.clone(),
                            reason,
                        }],
                    }),
                }
            }
            _ => {
                let address = info.address.clone().unwrap_or_else(|| info.parent.clone());
                // The group was accepted when the device was made.
                self.assign_passthrough(&address, true, &making)
            }
        };
        drop(held);
        drop(intent);
        result
    }

    /// The attributes a start writes: the definition's, else the parameters vgpud recorded.
    pub(super) fn definition_attrs(&self, info: &DeviceInfo) -> Vec<(String, String)> {
        // Through the one state-file reader: a link, FIFO or malformed file there is set
        // aside, never followed or waited on.
        if let Ok(Some(def)) = mdevctl::read(&self.host, &info.parent, &info.uuid) {
            return def.attrs;
        }
        info.attributes
            .get(VGPU_PARAMS)
            .filter(|v| !v.trim().is_empty())
            .map(|v| vec![(VGPU_PARAMS.to_string(), v.clone())])
            .unwrap_or_default()
    }

    /// Stops an active device and keeps its definition; a device without one is removed.
    pub fn stop_device(&self, uuid: &str) -> EngineResult<DeviceInfo> {
        let uuid = super::request::parse_uuid(uuid)?;
        let info = self.known(&uuid)?;
        if !info.persistent {
            return self.remove_device(&uuid);
        }
        let claim = self.claim(&uuid, false)?;
        if !info.active {
            return Ok(info);
        }
        if info.kind != DeviceKind::Mdev {
            let intent = self.intent_guard(&uuid);
            if let Err(e) = self.release_pci(&info, true) {
                // A release that failed half-way is finished by the next start's replay.
                intent.keep_open();
                return Err(e);
            }
            if self.is_mig_backed(&info) {
                self.refresh_nvidia(&info.parent, false);
            }
            let stopped = DeviceInfo {
                active: false,
                iommu_group: None,
                address: match info.kind {
                    DeviceKind::SriovVgpu => None,
                    _ => info.address.clone(),
                },
                ..info
            };
            let params = stopped.attributes.get(VGPU_PARAMS).cloned();
            if let Err(e) = self.write_record(&stopped, params) {
                // The replay of the release writes the record.
                intent.keep_open();
                return Err(e);
            }
            drop(intent);
            self.mark_stopped(&uuid, true);
            claim.finish(Some(stopped.clone()));
            return Ok(stopped);
        }
        let intent = self.open_intent(
            &uuid,
            Operation::Stop {
                parent: info.parent.clone(),
            },
        )?;
        let gpu_lock = self.gpu_lock(&info.parent);
        let held = gpu_lock.as_ref().map(|l| lock(l));
        let result = self.write_remove(&uuid);
        drop(held);
        drop(intent);
        result?;
        let stopped = DeviceInfo {
            active: false,
            iommu_group: None,
            attributes: self.definition_attrs(&info).into_iter().collect(),
            ..info
        };
        self.mark_stopped(&uuid, true);
        claim.finish(Some(stopped.clone()));
        Ok(stopped)
    }

    /// Marks (or unmarks) a device as stopped by request until the next boot, below `run/`:
    /// the restore of a restarted vgpud leaves it stopped, as `mdevctl stop` leaves an
    /// autostart device stopped until the host boots again.
    fn mark_stopped(&self, uuid: &str, stopped: bool) {
        let dir = self.host.run(STOPPED);
        let file = dir.join(uuid);
        let done = if stopped {
            std::fs::create_dir_all(&dir).and_then(|()| std::fs::write(&file, b""))
        } else {
            match std::fs::remove_file(&file) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                other => other,
            }
        };
        if let Err(e) = done {
            tracing::warn!(%uuid, path = %file.display(), error = %e, "could not keep whether the device was stopped on request");
        }
    }

    /// The devices stopped on request since the boot (see [`Engine::mark_stopped`]).
    pub(super) fn stopped_on_request(&self) -> std::collections::BTreeSet<String> {
        self.host
            .list_dir(&self.host.run(STOPPED))
            .unwrap_or_default()
            .into_iter()
            .filter_map(|name| crate::model::normalize_uuid(&name).filter(|u| *u == name))
            .collect()
    }

    /// Changes whether a device persists and autostarts.
    pub fn modify_device(&self, uuid: &str, req: &ModifyRequest) -> EngineResult<DeviceInfo> {
        let uuid = super::request::parse_uuid(uuid)?;
        let claim = self.claim(&uuid, false)?;
        let info = self.known(&uuid)?;
        let persistent = req.persistent.unwrap_or(info.persistent);
        let autostart = req.autostart.unwrap_or(info.autostart && persistent);
        if autostart && !persistent {
            return Err(EngineError::InvalidArgument(format!(
                "device {uuid} cannot autostart without being persistent"
            )));
        }
        if !persistent && !info.active {
            return Err(EngineError::InvalidArgument(format!(
                "device {uuid} is not active: dropping its definition would lose it; use RemoveDevice"
            )));
        }
        let intent = self.open_intent(
            &uuid,
            Operation::Modify {
                parent: info.parent.clone(),
                persistent,
                autostart,
            },
        )?;
        let updated = match self.apply_persistence(&info, persistent, autostart) {
            Ok(updated) => updated,
            Err(e) => {
                // The replay at the next start applies the change.
                intent.keep_open();
                return Err(e);
            }
        };
        drop(intent);
        claim.finish(Some(updated.clone()));
        Ok(updated)
    }

    /// Writes or removes the definition and rewrites the record to match.
    pub(super) fn apply_persistence(
        &self,
        info: &DeviceInfo,
        persistent: bool,
        autostart: bool,
    ) -> EngineResult<DeviceInfo> {
        let uuid = &info.uuid;
        let attrs = self.definition_attrs(info);
        let params = attrs
            .iter()
            .find(|(k, _)| k == VGPU_PARAMS)
            .map(|(_, v)| v.clone());
        if info.kind != DeviceKind::Mdev {
            Ok(())
        } else if persistent {
            mdevctl::write(
                &self.host,
                &mdevctl::Definition {
                    parent: info.parent.clone(),
                    uuid: uuid.clone(),
                    mdev_type: info.type_id.clone(),
                    autostart,
                    attrs,
                },
            )
        } else {
            mdevctl::remove(&self.host, &info.parent, uuid).map(|_| ())
        }
        .map_err(|e| EngineError::persist(format!("changing the definition of {uuid}"), e))?;
        let created = if info.created == 0 {
            persist::now_unix()
        } else {
            info.created
        };
        let updated = DeviceInfo {
            persistent,
            autostart,
            created,
            ..info.clone()
        };
        self.write_record(&updated, params)?;
        Ok(updated)
    }

    /// Changes a device's owner tag (attach and detach do), kept in vgpud's record.
    pub fn set_owner(&self, uuid: &str, owner: &str) -> EngineResult<DeviceInfo> {
        let uuid = super::request::parse_uuid(uuid)?;
        let claim = self.claim(&uuid, false)?;
        let info = self.known(&uuid)?;
        let params = self.params_of(&info);
        let updated = DeviceInfo {
            owner: owner.to_string(),
            ..info
        };
        self.write_record(&updated, params)?;
        claim.finish(Some(updated.clone()));
        Ok(updated)
    }

    /// The vGPU parameters a device's definition or record keeps.
    pub(super) fn params_of(&self, info: &DeviceInfo) -> Option<String> {
        self.definition_attrs(info)
            .into_iter()
            .find(|(k, _)| k == VGPU_PARAMS)
            .map(|(_, v)| v)
    }

    /// Writes vgpud's record of a device as `info` describes it.
    pub(super) fn write_record(
        &self,
        info: &DeviceInfo,
        params: Option<String>,
    ) -> EngineResult<()> {
        state::write(&self.host, &record_of(info, params))
            .map_err(|e| EngineError::persist(format!("recording {}", info.uuid), e))
    }

    /// A device found on the host, described with what vgpud knows of it.
    pub(super) fn describe_active(
        &self,
        dev: MdevDevice,
        known: Option<&DeviceInfo>,
    ) -> DeviceInfo {
        DeviceInfo {
            type_name: self.type_name(&dev.parent, &dev.type_id),
            owner: known.map(|k| k.owner.clone()).unwrap_or_default(),
            active: true,
            persistent: known.is_some_and(|k| k.persistent),
            autostart: known.is_some_and(|k| k.autostart),
            created: known.map_or(0, |k| k.created),
            uuid: dev.uuid,
            parent: dev.parent,
            type_id: dev.type_id,
            iommu_group: dev.iommu_group,
            attributes: dev.attributes,
            kind: DeviceKind::Mdev,
            address: None,
            functions: Vec::new(),
        }
    }
}

/// vgpud's record of a device as `info` describes it.
pub(super) fn record_of(info: &DeviceInfo, params: Option<String>) -> state::DeviceRecord {
    state::DeviceRecord {
        version: state::VERSION,
        uuid: info.uuid.clone(),
        kind: info.kind.into(),
        parent: info.parent.clone(),
        type_id: info.type_id.clone(),
        owner: info.owner.clone(),
        created: info.created,
        persistent: info.persistent,
        autostart: info.autostart,
        params,
        address: info.address.clone(),
        functions: info.functions.clone(),
    }
}

/// Attributes as a map, for devices described from a definition.
pub(super) fn attr_map(attrs: &[(String, String)]) -> BTreeMap<String, String> {
    attrs.iter().cloned().collect()
}

impl Engine {
    /// Whether a device is an SR-IOV vGPU of a MIG-backed type (NVML's view of its GPU).
    pub(super) fn is_mig_backed(&self, info: &DeviceInfo) -> bool {
        info.kind == DeviceKind::SriovVgpu
            && crate::discovery::sriov::nvidia_type_number(&info.type_id)
                .is_some_and(|n| self.mig_profile_of_type(&info.parent, n).is_some())
    }
}

/// Where devices stopped on request are marked until the next boot, below `run/`.
const STOPPED: &str = "vgpud/stopped";

/// The NVIDIA type number of a vendor-VFIO type (`nvidia-1414` → 1414).
fn sriov_type_number(ty: &MdevType) -> Option<u32> {
    crate::discovery::sriov::nvidia_type_number(&ty.id)
}
