//! The root's gather phase: admitting each rank's hello, then sending
//! every PE all cards (or, to a lazy PE, the localities, or only its
//! node's; to a PE whose cards and localities are in a store, only the
//! joined frame), and serving lazy PEs' card requests.

use super::*;

/// How a PE joined (its hello's flags), which says what it gets once every
/// PE is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum How {
    /// Every card (the all-cards frame).
    All,
    /// Lazily: the localities frame, cards on request.
    Lazy,
    /// From a store: the joined frame only.
    Store,
    /// Lazily, its node's localities only: the node localities frame,
    /// cards (with their localities) on request.
    Node,
}

impl Root {
    pub(super) fn gather(&mut self, deadline: Instant) -> Result<(), BootstrapError> {
        while self.arrived < self.size {
            let now = Instant::now();
            if now >= deadline {
                return Err(BootstrapError::Timeout {
                    phase: "allgather",
                    missing: self.missing(|r| self.by_rank[r as usize].is_some()),
                    waited: self.timeout,
                });
            }
            if let Some(ev) = self.next_event(Some(deadline))? {
                self.on_gather_event(ev)?;
            }
        }
        Ok(())
    }

    pub(super) fn on_gather_event(&mut self, ev: Event) -> Result<(), BootstrapError> {
        match ev {
            Event::Hello {
                conn,
                hello: Err(why),
            } => {
                // Not part of the job: it is told what was wrong with its
                // own bytes, or only that it proved nothing, and the job
                // goes on.
                let peer = self.peer_name(conn);
                let (counted, reason) = match why {
                    Unadmitted::Malformed(reason) => (Refusal::Malformed, reason),
                    Unadmitted::NoHello(reason) => (Refusal::NoHello, reason),
                    Unadmitted::Unauthenticated => (
                        Refusal::BadMac,
                        "refused: the hello does not prove the job's secret".into(),
                    ),
                };
                self.stats.count(counted);
                self.refuse(conn, &BootstrapError::Protocol { peer, reason });
                Ok(())
            }
            Event::Hello { conn, hello: Ok(h) } => self.on_hello(conn, h),
            Event::Frame { conn, kind, .. } => match self.rank_of(conn) {
                Some(_) => Err(BootstrapError::Protocol {
                    peer: self.peer_name(conn),
                    reason: format!(
                        "sent a {} frame before the allgather finished",
                        kind_name(kind)
                    ),
                }),
                None => Ok(()),
            },
            Event::Gone { conn, reason } => match self.rank_of(conn) {
                Some(rank) => Err(BootstrapError::Disconnected {
                    rank,
                    during: "during the allgather".into(),
                    reason,
                }),
                None => {
                    self.drop_conn(conn);
                    Ok(())
                }
            },
        }
    }

    pub(super) fn on_hello(&mut self, conn: u64, h: Hello) -> Result<(), BootstrapError> {
        let Some((peer, root_nonce)) = self.conns.get(&conn).map(|c| (c.peer, c.root_nonce)) else {
            return Ok(());
        };
        // The hello proved the secret (its reader checked): from here on the
        // peer is part of the job, and what it says wrongly fails the job;
        // except a second claim of a rank, which is refused and counted.
        if h.size != self.size {
            return Err(BootstrapError::SizeMismatch {
                rank: h.rank,
                expected: self.size,
                found: h.size,
            });
        }
        if h.rank >= self.size {
            return Err(BootstrapError::RankOutOfRange {
                rank: h.rank,
                size: self.size,
                peer,
            });
        }
        if let Some(first) = self.by_rank[h.rank as usize] {
            let first = self.conns.get(&first).map_or(peer, |c| c.peer);
            self.stats.count(Refusal::DuplicateRank);
            self.refuse(
                conn,
                &BootstrapError::DuplicateRank {
                    rank: h.rank,
                    first,
                    second: peer,
                },
            );
            return Ok(());
        }
        let card = Card::decode(&h.card).map_err(|source| BootstrapError::BadCard {
            from: format!("rank {} ({peer})", h.rank),
            source,
        })?;
        // Cards travel with job id 0: the job id never crosses the wire.
        if card.job_id != 0 || card.rank != h.rank {
            return Err(BootstrapError::Protocol {
                peer: format!("rank {} ({peer})", h.rank),
                reason: format!(
                    "the card says job {:016x} rank {}, the hello rank {} (cards travel with job id 0)",
                    card.job_id, card.rank, h.rank
                ),
            });
        }
        match self.class_ref {
            None => self.class_ref = Some((h.rank, card.class_encoding_version)),
            Some((reference, expected)) if expected != card.class_encoding_version => {
                return Err(BootstrapError::ClassVersionMismatch {
                    rank: h.rank,
                    found: card.class_encoding_version,
                    reference,
                    expected,
                });
            }
            Some(_) => {}
        }
        let welcome = Handshake {
            key: &self.key,
            job_id: self.job_id,
            root_nonce,
        }
        .welcome_frame(&h);
        self.stats.add_sent(welcome.len());
        if let Some(c) = self.conns.get_mut(&conn) {
            c.rank = Some(h.rank);
            c.lazy = h.flags & FLAG_LAZY != 0;
            c.store = h.flags & FLAG_STORE != 0;
            c.node = h.flags & FLAG_NODE != 0;
            if let Err(e) = c.send(welcome.into(), Instant::now()) {
                // Reported as the connection's end.
                self.end(conn, &e.to_string());
            }
        }
        self.by_rank[h.rank as usize] = Some(conn);
        self.cards[h.rank as usize] = h.card;
        self.locs[h.rank as usize] = Locality::of(&card);
        self.arrived += 1;
        Ok(())
    }

    pub(super) fn send_to_rank(
        &mut self,
        rank: u32,
        bytes: &Rc<[u8]>,
        phase: &'static str,
    ) -> Result<(), BootstrapError> {
        let id = self.by_rank[rank as usize];
        let Some(c) = id.and_then(|id| self.conns.get_mut(&id)) else {
            return Err(BootstrapError::Disconnected {
                rank,
                during: format!("during the {phase}"),
                reason: "connection closed".into(),
            });
        };
        self.stats.add_sent(bytes.len());
        c.send(Rc::clone(bytes), Instant::now())
            .map_err(|source| BootstrapError::SendFrame {
                phase,
                peer: format!("rank {rank} ({})", c.peer),
                source,
            })
    }

    /// How `rank` joined: with every card, lazily, or from a store.
    pub(super) fn joined_how(&self, rank: u32) -> How {
        match self.by_rank[rank as usize].and_then(|id| self.conns.get(&id)) {
            Some(c) if c.store => How::Store,
            Some(c) if c.node => How::Node,
            Some(c) if c.lazy => How::Lazy,
            _ => How::All,
        }
    }

    /// Ends the allgather: every card to each PE that joined with all
    /// cards, the localities (as runs) to each that joined lazily, the
    /// joined frame (size and class version: O(1) bytes) to each that
    /// takes cards and localities from a store, its node's runs to each
    /// that asked for them (one frame per node, shared by its PEs). The
    /// cards are kept only while a lazy PE may ask for them.
    pub(super) fn send_cards(&mut self) -> Result<(), BootstrapError> {
        let how: Vec<How> = (0..self.size).map(|r| self.joined_how(r)).collect();
        let class = self.class_ref.map_or(0, |(_, v)| v);
        if how.contains(&How::All) {
            let bytes: Rc<[u8]> = all_cards_frame(self.size, &self.cards).into();
            for rank in (0..self.size).filter(|&r| how[r as usize] == How::All) {
                self.send_to_rank(rank, &bytes, "allgather")?;
            }
        }
        if how.contains(&How::Store) {
            let bytes: Rc<[u8]> = frame(KIND_JOINED, &joined_payload(self.size, class)).into();
            for rank in (0..self.size).filter(|&r| how[r as usize] == How::Store) {
                self.send_to_rank(rank, &bytes, "allgather")?;
            }
        }
        if how.contains(&How::Lazy) {
            let mut locs = Localities::from_cards(&[], class);
            for &loc in &self.locs {
                locs.push(loc);
            }
            let bytes: Rc<[u8]> = frame(KIND_LOCALITIES, &locs.encode()).into();
            for rank in (0..self.size).filter(|&r| how[r as usize] == How::Lazy) {
                self.send_to_rank(rank, &bytes, "allgather")?;
            }
        }
        if how.contains(&How::Node) {
            let (size, runs) = (self.size, lazy::node_runs(&self.locs));
            let mut frames: HashMap<u64, Rc<[u8]>> = HashMap::new();
            for rank in (0..self.size).filter(|&r| how[r as usize] == How::Node) {
                let node = self.locs[rank as usize].node_id;
                let bytes = frames
                    .entry(node)
                    .or_insert_with(|| {
                        let mine = runs.get(&node).map_or(&[][..], Vec::as_slice);
                        let p = Localities::encode_node(size, class, node, mine);
                        frame(KIND_NODE_LOCALITIES, &p).into()
                    })
                    .clone();
                self.send_to_rank(rank, &bytes, "allgather")?;
            }
        }
        if !how.contains(&How::Lazy) && !how.contains(&How::Node) {
            self.cards = Vec::new();
        }
        self.locs = Vec::new();
        Ok(())
    }

    /// Answers a card request of connection `conn`: every card it names,
    /// or a refusal of the whole request (counted; the connection and the
    /// job go on). A request that does not decode fails the job, like any
    /// bad frame from a PE.
    pub(super) fn serve_cards(&mut self, conn: u64, body: &[u8]) -> Result<(), BootstrapError> {
        let peer = self.peer_name(conn);
        let asked = lazy::decode_request(body).map_err(|e| BootstrapError::Protocol {
            peer,
            reason: format!("malformed card request: {e}"),
        })?;
        let size = self.size;
        let have_cards = !self.cards.is_empty();
        let Some(c) = self.conns.get_mut(&conn) else {
            return Ok(());
        };
        let verdict = asked.and_then(|ranks| {
            if c.wants_write() || !have_cards {
                return Err(CardRefusal::NotNow);
            }
            if let Some(&r) = ranks.iter().find(|&&r| r >= size) {
                return Err(CardRefusal::UnknownRank(r));
            }
            let mut counts: HashMap<u32, u8> = HashMap::new();
            for &r in &ranks {
                let n = counts
                    .entry(r)
                    .or_insert_with(|| c.served.get(&r).copied().unwrap_or(0));
                *n += 1;
                if *n > MAX_SERVES_PER_CARD {
                    return Err(CardRefusal::AskedTwice(r));
                }
            }
            c.served.extend(counts);
            Ok(ranks)
        });
        let bytes: Rc<[u8]> = match verdict {
            Ok(ranks) => {
                self.stats.add_served(ranks.len());
                let cards = &self.cards;
                let payload =
                    lazy::encode_answer(ranks.iter().map(|&r| cards[r as usize].as_slice()));
                frame(KIND_CARD_ANSWER, &payload).into()
            }
            Err(why) => {
                self.stats.add_card_refusal();
                frame(KIND_CARD_REFUSAL, &why.encode()).into()
            }
        };
        self.stats.add_sent(bytes.len());
        if let Some(c) = self.conns.get_mut(&conn)
            && let Err(e) = c.send(bytes, Instant::now())
        {
            self.end(conn, &e.to_string());
        }
        Ok(())
    }
}
