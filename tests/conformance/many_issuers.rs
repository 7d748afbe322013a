//! Many issuers in parallel: eight threads, each its own issuer, write their own region in
//! batches, read it back, and verify — on a shared file and the same subsystem.
//! Guards against: one issuer's I/O completed into another's handle or buffer (a block reading back
//! another issuer's or another round's bytes); a batched write not yet on the file when its wait
//! returned; and a hang when eight issuers submit at once.

use crate::support::*;
use dbaio::{IoBuf, IoMethodKind, OpenOptions};

fn scenario(m: IoMethodKind) {
    let d = dir();
    let aio = start(m);
    let path = d.path().join("shared");
    let f = aio.open(&path, &OpenOptions::read_write()).unwrap();
    std::thread::scope(|s| {
        for t in 0..8u64 {
            let (aio, f) = (aio.clone(), f.clone());
            s.spawn(move || {
                let me = aio.register_issuer(&format!("t{t}")).unwrap();
                let base = t * 64 * 4096;
                for round in 0..4u8 {
                    me.begin_batch().unwrap();
                    let ws: Vec<_> = (0..64u64)
                        .map(|i| {
                            me.acquire().unwrap().write(
                                &f,
                                base + i * 4096,
                                IoBuf::from_slice(&[round ^ (t as u8) ^ (i as u8); 4096]),
                            )
                        })
                        .collect();
                    me.end_batch();
                    for w in ws {
                        me.wait(w).check().unwrap();
                    }
                    let rs: Vec<_> = (0..64u64)
                        .map(|i| {
                            me.acquire()
                                .unwrap()
                                .read(&f, base + i * 4096, IoBuf::new(4096))
                        })
                        .collect();
                    for (i, r) in rs.into_iter().enumerate() {
                        let b = me.wait(r).into_buf();
                        assert!(
                            b.iter().all(|&x| x == round ^ (t as u8) ^ (i as u8)),
                            "issuer {t} block {i}"
                        );
                    }
                }
            });
        }
    });
}

crate::for_every_method!(scenario);
