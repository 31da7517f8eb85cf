"""Rules that turn Bazel's C++ targets into an installable tree.

cc_objects: every object file of the workspace's own libraries behind `deps`
(or of some packages only), so that one shared library can carry all of them
(Bazel's own shared-library link keeps only the objects something
references).

cc_headers: every header of the workspace's own libraries behind `deps`
(sources and generated proto headers), each under its path in the workspace.

cc_link_flags: the libraries' link flags (-l... of the system libraries they
use), one per line, for the installed pkg-config and CMake files.

install_tree: a tarball of the installed layout (bin/, lib/, include/, share/)
that tools/install.sh unpacks into a prefix.
"""

def _own(f):
    # Files of this workspace, not of an external repository.
    return f.owner != None and f.owner.workspace_name == ""

def _linker_inputs(deps):
    return depset(transitive = [d[CcInfo].linking_context.linker_inputs for d in deps]).to_list()

def _in_packages(f, packages):
    # Whether `f` belongs to one of `packages` (or a subpackage); every
    # file when `packages` is empty.
    if not packages:
        return True
    package = f.owner.package
    for p in packages:
        if package == p or package.startswith(p + "/"):
            return True
    return False

def _cc_objects_impl(ctx):
    objects = []
    for linker_input in _linker_inputs(ctx.attr.deps):
        for lib in linker_input.libraries:
            # The PIC objects: they go into a shared library.
            for o in (lib.pic_objects or lib.objects or []):
                if _own(o) and _in_packages(o, ctx.attr.packages) and o not in objects:
                    objects.append(o)
    return [DefaultInfo(files = depset(objects))]

cc_objects = rule(
    implementation = _cc_objects_impl,
    attrs = {
        "deps": attr.label_list(providers = [CcInfo]),
        # Only these packages' objects (empty: all), for a library that
        # links another one for the rest.
        "packages": attr.string_list(),
    },
)

def _cc_headers_impl(ctx):
    headers = depset(transitive = [
        d[CcInfo].compilation_context.headers
        for d in ctx.attr.deps
    ])
    own = [
        h
        for h in headers.to_list()
        if _own(h) and not h.short_path.startswith("third_party/") and _in_packages(h, ctx.attr.packages)
    ]
    return [DefaultInfo(files = depset(own))]

cc_headers = rule(
    implementation = _cc_headers_impl,
    attrs = {
        "deps": attr.label_list(providers = [CcInfo]),
        # Only these packages' headers (empty: all).
        "packages": attr.string_list(),
    },
)

def _cc_link_flags_impl(ctx):
    flags = []
    for linker_input in _linker_inputs(ctx.attr.deps):
        for flag in linker_input.user_link_flags:
            if flag not in flags:
                flags.append(flag)
    out = ctx.actions.declare_file(ctx.label.name + ".txt")
    ctx.actions.write(out, "".join([f + "\n" for f in flags]))
    return [DefaultInfo(files = depset([out]))]

cc_link_flags = rule(
    implementation = _cc_link_flags_impl,
    attrs = {"deps": attr.label_list(providers = [CcInfo])},
)

def _install_tree_impl(ctx):
    # Each entry: (file, path under the prefix).
    entries = []
    for dest, targets in [("bin", ctx.attr.bins), ("lib", ctx.attr.libs), ("share/rankd", ctx.attr.share)]:
        for t in targets:
            for f in t.files.to_list():
                entries.append((f, dest + "/" + f.basename))
    for t in ctx.attr.headers:
        for f in t.files.to_list():
            path = f.short_path
            for prefix in ctx.attr.strip_include_prefixes:
                if path.startswith(prefix):
                    path = path[len(prefix):]
                    break
            entries.append((f, ctx.attr.include_dir + "/" + path))
    for t, dest in ctx.attr.python_packages.items():
        for f in t.files.to_list():
            entries.append((f, dest + "/" + f.basename))
    for t, dest in ctx.attr.files.items():
        for f in t.files.to_list():
            entries.append((f, dest))
    out = ctx.outputs.out
    lines = ["set -eu", "stage=$(mktemp -d)", "trap 'rm -rf \"$stage\"' EXIT"]
    for f, dest in entries:
        lines.append('mkdir -p "$stage/$(dirname %s)" && cp -L %s "$stage/%s"' % (dest, f.path, dest))
    lines.append('chmod -R u+w,go-w "$stage"')
    lines.append('tar -C "$stage" --owner=0 --group=0 --numeric-owner -cf %s .' % out.path)
    ctx.actions.run_shell(
        inputs = [f for f, _ in entries],
        outputs = [out],
        command = "\n".join(lines),
        mnemonic = "InstallTree",
    )
    return [DefaultInfo(files = depset([out]))]

install_tree = rule(
    implementation = _install_tree_impl,
    attrs = {
        "bins": attr.label_list(allow_files = True),
        "libs": attr.label_list(allow_files = True),
        "share": attr.label_list(allow_files = True),
        "headers": attr.label_list(),
        "include_dir": attr.string(default = "include"),
        "strip_include_prefixes": attr.string_list(),
        "files": attr.label_keyed_string_dict(allow_files = True),
        "python_packages": attr.label_keyed_string_dict(allow_files = True),
        "out": attr.output(mandatory = True),
    },
)
