//! `maxclients` against the process's open-file limit, as Redis's
//! adjustOpenFilesLimit: every client needs a descriptor, plus 32 the
//! server keeps for itself. The soft limit is raised when it can be;
//! otherwise maxclients is lowered to fit, with Redis's warnings.
//!
//! A leaf: must not touch the config or the server; callers (start-up,
//! CONFIG SET) pass `maxclients` and apply what comes back.

/// Descriptors kept for the server's own files, listeners and threads.
pub const RESERVED_FDS: usize = 32;

/// The maxclients the process can serve (raising the limit if needed),
/// with the log lines to write (warnings, or the notice of a raise).
/// Err when even one client cannot fit.
pub fn adjust(maxclients: usize) -> Result<(usize, Vec<String>), String> {
    let want = (maxclients + RESERVED_FDS) as libc::rlim_t;
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read and write `lim`.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == -1 {
        let e = std::io::Error::last_os_error();
        return Ok((
            1024 - RESERVED_FDS,
            vec![format!("Unable to obtain the current NOFILE limit ({e}), assuming 1024 and setting the max clients configuration accordingly.")],
        ));
    }
    let old = lim.rlim_cur;
    if old >= want {
        return Ok((maxclients, Vec::new()));
    }
    let mut best = want;
    let mut error = None;
    // Bounded: steps of 16 down to the current limit.
    while best > old {
        let try_lim = libc::rlimit {
            rlim_cur: best,
            rlim_max: best.max(lim.rlim_max),
        };
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &try_lim) } != -1 {
            break;
        }
        error = Some(std::io::Error::last_os_error());
        if best < 16 {
            best = old;
            break;
        }
        best -= 16;
    }
    best = best.max(old);
    if best >= want {
        return Ok((
            maxclients,
            vec![format!(
                "Increased maximum number of open files to {want} (it was originally set to {old})."
            )],
        ));
    }
    if best as usize <= RESERVED_FDS {
        return Err(format!(
            "Your current 'ulimit -n' of {old} is not enough for the server to start. Please increase your open file limit to at least {}. Exiting.",
            RESERVED_FDS + 1
        ));
    }
    let reduced = best as usize - RESERVED_FDS;
    let why = error.map_or_else(String::new, |e| {
        let s = e.to_string();
        s.split(" (os error").next().unwrap_or(&s).to_string()
    });
    Ok((
        reduced,
        vec![
            format!("You requested maxclients of {maxclients} requiring at least {want} max file descriptors."),
            format!("Server can't set maximum open files to {want} because of OS error: {why}."),
            format!("Current maximum open files is {best}. maxclients has been reduced to {reduced} to compensate for low ulimit. If you need higher maxclients increase 'ulimit -n'."),
        ],
    ))
}
