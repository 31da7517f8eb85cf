// Validates Kubernetes objects offline, the way the API server would check
// their shape (no cluster needed).
//
// Usage: node validate.mjs FILE.yaml... ("-" reads standard input)
//
// Every object of every (multi-document) YAML file is checked:
//   1. against the Kubernetes OpenAPI schema of its apiVersion/kind
//      (npm kubernetes-models: types, required fields, enums, formats);
//      ServiceMonitor against the Prometheus Operator's schema
//      (@kubernetes-models/prometheus-operator); LeaderWorkerSet against
//      schemas/leaderworkerset.x-k8s.io_v1.schema.json, with its pod
//      templates checked against the Kubernetes PodTemplateSpec schema;
//   2. for unknown fields, like `kubectl apply --validate=strict`: every key
//      must be a field of its Kubernetes type (field lists of the generated
//      models in @kubernetes/client-node).
// An apiVersion/kind it has no schema for is an error (fail closed), and so
// is a duplicate key in the YAML.
//
// Prints "FILE <path>" before each file's objects, "OK Kind/name" or
// "ERROR Kind/name: <where>: <what>" per object, and a summary; exits 0 when everything is valid, 1 otherwise, 2 on bad usage.
import { readFileSync } from "node:fs";
import { parseAllDocuments } from "yaml";
import Ajv from "ajv";
import * as ClientModels from "@kubernetes/client-node/dist/gen/models/all.js";

const LWS_API_VERSION = "leaderworkerset.x-k8s.io/v1";
const LWS_SCHEMA = JSON.parse(
  readFileSync(
    new URL("./schemas/leaderworkerset.x-k8s.io_v1.schema.json", import.meta.url),
  ),
);

const ajv = new Ajv({ allErrors: true, strict: false });
const validateLws = ajv.compile(LWS_SCHEMA);

function isObject(value) {
  return value !== null && typeof value === "object" && !Array.isArray(value);
}

// The kubernetes-models (or prometheus-operator) module of a kind.
function modelModule(apiVersion, kind) {
  if (apiVersion === "monitoring.coreos.com/v1") {
    return `@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/${kind}`;
  }
  const slash = apiVersion.indexOf("/");
  if (slash < 0) return `kubernetes-models/${apiVersion}/${kind}`;  // core
  return `kubernetes-models/${apiVersion}/${kind}`;
}

// The @kubernetes/client-node model class name of a built-in kind.
function clientModelName(apiVersion, kind) {
  const version = apiVersion.includes("/") ? apiVersion.split("/")[1] : apiVersion;
  return version.charAt(0).toUpperCase() + version.slice(1) + kind;
}

async function loadModel(apiVersion, kind) {
  try {
    const module = await import(modelModule(apiVersion, kind));
    return module[kind] ?? null;
  } catch {
    return null;
  }
}

// Reports keys that are not fields of `type` (a client-node model name or a
// type expression such as "Array<V1Container>"). Primitive values are left
// to the schema check.
function checkFields(value, type, path, errors) {
  if (value === null || value === undefined) return;
  let match = /^Array<(.+)>$/.exec(type);
  if (match) {
    if (Array.isArray(value)) {
      value.forEach((item, i) => checkFields(item, match[1], `${path}[${i}]`, errors));
    }
    return;
  }
  match = /^\{ \[key: string\]: (.+); \}$/.exec(type);
  if (match) {
    if (isObject(value)) {
      for (const [key, item] of Object.entries(value)) {
        checkFields(item, match[1], `${path}.${key}`, errors);
      }
    }
    return;
  }
  const model = ClientModels[type];
  if (!model || typeof model.getAttributeTypeMap !== "function") return;
  if (!isObject(value)) return;
  const fields = new Map(model.getAttributeTypeMap().map((a) => [a.baseName, a.type]));
  for (const [key, item] of Object.entries(value)) {
    if (!fields.has(key)) {
      errors.push(`${path}.${key}: unknown field (${type} has no field "${key}")`);
    } else {
      checkFields(item, fields.get(key), `${path}.${key}`, errors);
    }
  }
}

function schemaErrors(error, prefix = "") {
  if (error?.details && Array.isArray(error.details)) {
    return error.details.map(
      (d) => `${prefix}${d.instancePath || "/"}: ${d.message}${
        d.params?.allowedValues ? ` (${d.params.allowedValues.join(", ")})` : ""}`,
    );
  }
  return [`${prefix}${error?.message ?? String(error)}`];
}

async function validateModel(apiVersion, kind, object, prefix = "") {
  const Model = await loadModel(apiVersion, kind);
  if (!Model) return { known: false, errors: [] };
  try {
    new Model(object).validate();
    return { known: true, errors: [] };
  } catch (error) {
    return { known: true, errors: schemaErrors(error, prefix) };
  }
}

async function validateLeaderWorkerSet(object) {
  const errors = [];
  if (!validateLws(object)) {
    for (const e of validateLws.errors) {
      const extra = e.params?.additionalProperty
        ? ` "${e.params.additionalProperty}"`
        : e.params?.allowedValues
          ? ` (${e.params.allowedValues.join(", ")})`
          : "";
      errors.push(`${e.instancePath || "/"}: ${e.message}${extra}`);
    }
  }
  const template = object?.spec?.leaderWorkerTemplate ?? {};
  for (const which of ["leaderTemplate", "workerTemplate"]) {
    if (!isObject(template[which])) continue;
    const path = `/spec/leaderWorkerTemplate/${which}`;
    // The CRD embeds core/v1 PodTemplateSpec; check it (and the LWS's own
    // metadata) through a PodTemplate wrapper.
    const result = await validateModel(
      "v1",
      "PodTemplate",
      { apiVersion: "v1", kind: "PodTemplate", metadata: object.metadata, template: template[which] },
    );
    for (const e of result.errors) {
      errors.push(e.replace(/^(data)?\/template/, path));
    }
    checkFields(template[which], "V1PodTemplateSpec", path.replaceAll("/", ".").slice(1), errors);
  }
  checkFields(object.metadata, "V1ObjectMeta", "metadata", errors);
  return errors;
}

async function validateObject(object) {
  if (!isObject(object)) return ["document is not an object"];
  const { apiVersion, kind } = object;
  if (typeof apiVersion !== "string" || typeof kind !== "string") {
    return ["apiVersion and kind must be strings"];
  }
  if (apiVersion === LWS_API_VERSION && kind === "LeaderWorkerSet") {
    return validateLeaderWorkerSet(object);
  }
  if (apiVersion === "v1" && kind === "Secret" && isObject(object.data)) {
    // kustomize wraps long base64 values in lines; the API server's decoder
    // (Go's encoding/base64) skips line breaks, so check the joined value.
    const data = {};
    for (const [key, value] of Object.entries(object.data)) {
      data[key] = typeof value === "string" ? value.replace(/[\r\n]/g, "") : value;
    }
    object = { ...object, data };
  }
  const result = await validateModel(apiVersion, kind, object);
  if (!result.known) return [`no schema for ${apiVersion} ${kind}`];
  const errors = [...result.errors];
  const clientModel = clientModelName(apiVersion, kind);
  if (ClientModels[clientModel]) {
    checkFields(object, clientModel, kind, errors);
  } else if (!apiVersion.endsWith(".coreos.com/v1")) {
    errors.push(`no field list for ${apiVersion} ${kind} (strict check impossible)`);
  }
  return errors;
}

async function main() {
  const files = process.argv.slice(2);
  if (files.length === 0) {
    console.error("usage: node validate.mjs FILE.yaml... (- for stdin)");
    process.exit(2);
  }
  let checked = 0;
  let invalid = 0;
  for (const file of files) {
    console.log(`FILE ${file}`);
    const text = readFileSync(file === "-" ? 0 : file, "utf8");
    const documents = parseAllDocuments(text, { uniqueKeys: true });
    for (const document of documents) {
      if (document.errors.length > 0) {
        for (const e of document.errors) console.log(`ERROR ${file}: YAML: ${e.message}`);
        invalid += 1;
        continue;
      }
      const object = document.toJS();
      if (object === null || object === undefined) continue;
      checked += 1;
      const name = `${object?.kind ?? "?"}/${object?.metadata?.name ?? "?"}`;
      const errors = await validateObject(object);
      if (errors.length === 0) {
        console.log(`OK ${name}`);
      } else {
        invalid += 1;
        for (const e of errors) console.log(`ERROR ${name}: ${e}`);
      }
    }
  }
  console.log(`${checked} objects checked, ${invalid} invalid`);
  process.exit(invalid === 0 && checked > 0 ? 0 : 1);
}

await main();
