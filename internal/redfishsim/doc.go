// Package redfishsim is a Redfish service (DMTF DSP0266) for tests: one
// computer system, its chassis and one BMC manager with a virtual CD,
// served over TLS on 127.0.0.1 with a certificate of its own whose SPKI
// hash tests can pin.
//
// It serves what bmclib v2.3.0's redfish provider (gofish v0.19.0) reads
// and writes:
//
//	GET    /redfish/v1                      service root (no auth), links to
//	                                        Systems, Chassis, Managers, SessionService
//	                                        and Links.Sessions
//	POST   /redfish/v1/SessionService/Sessions  {"UserName","Password"} → 201,
//	                                        X-Auth-Token and Location headers; 401 otherwise
//	DELETE /redfish/v1/SessionService/Sessions/{id}
//	GET    /redfish/v1/Systems, /Systems/1  PowerState, Manufacturer, Model,
//	                                        SerialNumber, BiosVersion, Boot, Actions
//	POST   /redfish/v1/Systems/1/Actions/ComputerSystem.Reset {"ResetType"}
//	PATCH  /redfish/v1/Systems/1            {"Boot":{BootSourceOverrideTarget,
//	                                        BootSourceOverrideEnabled, BootSourceOverrideMode}}
//	GET    /redfish/v1/Managers, /Managers/1, /Managers/1/VirtualMedia, …/CD
//	POST   …/CD/Actions/VirtualMedia.InsertMedia {"Image","Inserted","WriteProtected"}
//	POST   …/CD/Actions/VirtualMedia.EjectMedia  {}
//	GET    /redfish/v1/Chassis, /Chassis/1
//
// Every other request needs an X-Auth-Token of a live session or HTTP
// basic auth; without, 401. Like real BMCs it refuses transitions that
// make no sense with 409 Conflict and a Redfish error body: On when on,
// ForceOff, GracefulShutdown or ForceRestart when off, InsertMedia when a
// medium is in, EjectMedia when none is. PowerCycle when off powers on
// (as several BMCs do; bmclib's "reset" relies on it not failing).
// Unknown reset types, boot targets or properties are 400.
package redfishsim
