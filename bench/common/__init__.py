"""What the benchmarks share: results as JSON (report), the machine (machine), ABBA turns (abba), CPU time from
/proc (proc_cpu), CTranslate2 conversion (ct2) and cached bundles (bundles)."""
