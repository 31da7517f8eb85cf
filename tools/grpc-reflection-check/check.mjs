// Asks a rankd daemon what grpcurl asks it, with a reflection client that is
// not rankd's own code (npm grpc-js-reflection-client over @grpc/grpc-js):
// the services it lists, a descriptor for each, a health check and
// Admin.GetJob built only from the fetched descriptors.
//
// Usage: node check.mjs HOST:PORT OPERATOR_TOKEN_FILE
//
// Prints one line per finding, for tests/reflection_test.cc:
//   SERVICES <name>,<name>,...         (sorted)
//   DESCRIBED <service> <method>,...   (one per listed service)
//   HEALTH <service> <status>          (grpc.health.v1.Health/Check)
//   GETJOB <job_id> <state>            (rankd.v1.Admin/GetJob, operator token)
//   GETJOB_WITHOUT_TOKEN <gRPC code>   (the same call without it)
// and exits 0, or prints "ERROR <what>" and exits 1.
import { readFileSync } from "node:fs";
import grpc from "@grpc/grpc-js";
import reflectionClient from "grpc-js-reflection-client";

const { GrpcReflection } = reflectionClient;
const [target, tokenFile] = process.argv.slice(2);
if (!target || !tokenFile) {
  console.error("usage: node check.mjs HOST:PORT OPERATOR_TOKEN_FILE");
  process.exit(2);
}
const credentials = grpc.ChannelCredentials.createInsecure();
const loaderOptions = { keepCase: true, enums: String, longs: String, defaults: true };

// gRPC 1.51's C++ server offers the v1alpha reflection service.
const reflection = new GrpcReflection(target, credentials, {}, "v1alpha");

function lookup(object, dotted) {
  return dotted.split(".").reduce((o, part) => (o ? o[part] : undefined), object);
}

function unary(client, method, request, metadata = new grpc.Metadata()) {
  return new Promise((resolve, reject) => {
    client[method](request, metadata, { deadline: Date.now() + 5000 },
                   (error, response) => (error ? reject(error) : resolve(response)));
  });
}

async function stubFor(service) {
  const descriptor = await reflection.getDescriptorBySymbol(service);
  const Stub = lookup(descriptor.getPackageObject(loaderOptions), service);
  if (typeof Stub !== "function") throw new Error(`no client for ${service}`);
  return new Stub(target, credentials);
}

try {
  const services = [...new Set(await reflection.listServices())].sort();
  console.log(`SERVICES ${services.join(",")}`);
  for (const service of services) {
    const methods = await reflection.listMethods(service);
    console.log(`DESCRIBED ${service} ${methods.map((m) => m.name).sort().join(",")}`);
  }

  const health = await stubFor("grpc.health.v1.Health");
  for (const name of ["", "readiness"]) {
    const answer = await unary(health, "Check", { service: name });
    console.log(`HEALTH ${name || '""'} ${answer.status}`);
  }

  const admin = await stubFor("rankd.v1.Admin");
  const token = readFileSync(tokenFile, "utf8").trim();
  const metadata = new grpc.Metadata();
  metadata.set("authorization", `Bearer ${token}`);
  const job = await unary(admin, "GetJob", {}, metadata);
  console.log(`GETJOB ${job.job_id} ${job.state}`);
  try {
    await unary(admin, "GetJob", {});
    console.log("GETJOB_WITHOUT_TOKEN 0");
  } catch (error) {
    console.log(`GETJOB_WITHOUT_TOKEN ${error.code}`);
  }
  process.exit(0);
} catch (error) {
  console.log(`ERROR ${error && error.message ? error.message : error}`);
  process.exit(1);
}
