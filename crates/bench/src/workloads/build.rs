//! Workload 7: build a generated C project with `make -jN` and gcc from the target.
//!
//! The tree looks like a real one where it matters for a shared filesystem:
//! many -I directories searched in order (so most `#include <...>` lookups
//! miss, including those for system headers, which are searched after every
//! -I directory), some of those directories symlinked into a vendor tree, and
//! object files written back through the target.

use std::fmt::Write as _;
use std::fs;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::process::Command;

use super::rng::Rng;
use super::{cmd, Ctx, MetricDef, Work};
use crate::config::Sizes;
use crate::error::{IoContext, WorkloadError};
use crate::stats::Unit;

pub(crate) const TOOLS: &[&str] = &["make", "gcc"];

pub(crate) const METRICS: &[MetricDef] = &[MetricDef {
    id: "build",
    label: "make + gcc build",
    unit: Unit::Seconds,
    key_messages: &["Twalk", "Treadlink"],
}];

/// Headers each .c file includes, picked across all include directories.
const INCLUDES_PER_SOURCE: usize = 8;
/// Every n-th include directory is a symlink into vendor/.
const SYMLINK_EVERY: usize = 4;

pub(crate) fn title(s: &Sizes) -> String {
    format!(
        "C build: {} .c files, {} -I dirs ({} symlinked) x {} headers, make -j{} with gcc -O2",
        s.build_sources,
        s.build_include_dirs,
        symlinked_dirs(s.build_include_dirs),
        s.build_headers_per_dir,
        s.build_jobs
    )
}

fn symlinked_dirs(dirs: usize) -> usize {
    (0..dirs).filter(|&d| is_symlinked(d)).count()
}

fn is_symlinked(dir: usize) -> bool {
    dir % SYMLINK_EVERY == 1
}

fn write(path: &Path, text: &str) -> Result<(), WorkloadError> {
    fs::write(path, text).ctx(|| format!("writing {}", path.display()))
}

fn mkdir(path: &Path) -> Result<(), WorkloadError> {
    fs::create_dir_all(path).ctx(|| format!("mkdir {}", path.display()))
}

/// Write the project into `root`.
pub(crate) fn prepare(root: &Path, s: &Sizes) -> Result<(), WorkloadError> {
    let (dirs, per_dir) = (s.build_include_dirs, s.build_headers_per_dir);
    let mut rng = Rng::new(7);
    for d in 0..dirs {
        let inc = root.join(format!("include/mod{d:02}"));
        let real = if is_symlinked(d) {
            let vendor = root.join(format!("vendor/lib{d:02}/include"));
            mkdir(&vendor)?;
            mkdir(inc.parent().unwrap_or(root))?;
            let to = format!("../vendor/lib{d:02}/include");
            symlink(&to, &inc).ctx(|| format!("symlink {}", inc.display()))?;
            vendor
        } else {
            mkdir(&inc)?;
            inc
        };
        for h in 0..per_dir {
            write(&real.join(format!("m{d:02}_{h}.h")), &header(d, h))?;
        }
        if d == dirs - 1 {
            // Found only in the last directory, included by every header: the
            // first include of it in each compile misses in all the others.
            write(
                &real.join("base.h"),
                "#ifndef BASE_H\n#define BASE_H\n#include <stdint.h>\ntypedef int64_t acc_t;\n#define MIX(a, b) ((a) * 31 + (b))\n#endif\n",
            )?;
        }
    }

    mkdir(&root.join("src"))?;
    let mut main = String::from("#include <stdio.h>\n");
    for i in 0..s.build_sources {
        let picks: Vec<(u64, u64)> = (0..INCLUDES_PER_SOURCE)
            .map(|_| (rng.below(dirs as u64), rng.below(per_dir as u64)))
            .collect();
        write(&root.join(format!("src/unit{i:04}.c")), &source(i, &picks))?;
        let _ = writeln!(main, "long unit{i:04}_entry(long seed);");
    }
    main.push_str("int main(void) {\n    long acc = 0;\n");
    for i in 0..s.build_sources {
        let _ = writeln!(main, "    acc += unit{i:04}_entry(acc + {i});");
    }
    main.push_str("    printf(\"%ld\\n\", acc);\n    return 0;\n}\n");
    write(&root.join("src/main.c"), &main)?;

    let include_flags: String = (0..dirs).map(|d| format!(" -Iinclude/mod{d:02}")).collect();
    write(
        &root.join("Makefile"),
        &format!(
            "CC := gcc\nCFLAGS := -O2 -Wall{include_flags}\n\
             SRCS := $(wildcard src/*.c)\nOBJS := $(SRCS:src/%.c=obj/%.o)\n\n\
             app: $(OBJS)\n\t$(CC) -o $@ $(OBJS)\n\n\
             obj/%.o: src/%.c | obj\n\t$(CC) $(CFLAGS) -c $< -o $@\n\n\
             obj:\n\tmkdir -p obj\n"
        ),
    )
}

// The C is deliberately light: compile time should be mostly what a shared
// filesystem changes (finding and reading headers, writing objects), with
// enough code that the compiler does real work per file.
fn header(d: usize, h: usize) -> String {
    let guard = format!("M{d:02}_{h}_H");
    format!(
        "#ifndef {guard}\n#define {guard}\n#include <base.h>\n\
         struct m{d:02}_{h}_state {{ acc_t total; int steps[{n}]; }};\n\
         static inline acc_t m{d:02}_{h}_step(acc_t a, int x) {{ return MIX(a, x ^ {n}); }}\n#endif\n",
        n = 4 + (d + h) % 8
    )
}

fn source(i: usize, picks: &[(u64, u64)]) -> String {
    let mut s = String::from("#include <string.h>\n#include <stdlib.h>\n");
    for (d, h) in picks {
        let _ = writeln!(s, "#include <m{d:02}_{h}.h>");
    }
    let _ = writeln!(
        s,
        "\nlong unit{i:04}_entry(long seed) {{\n    acc_t a = seed;"
    );
    for (k, (d, h)) in picks.iter().enumerate() {
        let _ = writeln!(s, "    a = m{d:02}_{h}_step(a, {k}) + (a % {}) ;", k + 2);
    }
    let _ = write!(s, "    return (long)labs((long)a);\n}}\n");
    s
}

fn make(dir: &Path, jobs: usize) -> Command {
    let mut c = Command::new("make");
    c.arg(format!("-j{jobs}")).arg("-s").current_dir(dir);
    // A bench started from inside make must not join the parent's jobserver.
    for var in ["MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEFILES"] {
        c.env_remove(var);
    }
    c
}

pub(crate) fn run(ctx: &mut Ctx<'_>) -> Result<(), WorkloadError> {
    let (dir, jobs) = (ctx.work.clone(), ctx.sizes.build_jobs.max(1));
    ctx.measure(&METRICS[0], |_| {
        cmd::run(&mut make(&dir, jobs), &dir)?;
        Ok(Work::Once)
    })?;
    let app = dir.join("app");
    if !app.is_file() {
        return Err(WorkloadError::Check(format!(
            "make succeeded but {} was not built",
            app.display()
        )));
    }
    Ok(())
}
