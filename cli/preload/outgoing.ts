// Entry of dist/preload.js, loaded into the local Node command with NODE_OPTIONS=--import: installing the hooks on
// import is this module's whole purpose (the one module with an import-time effect), and it does nothing without
// config.
import { installOutgoingHooks, readPreloadConfig } from './hooks.js';

const config = readPreloadConfig(process.env);
if (config) installOutgoingHooks(config);
