package redfishsim

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
)

const (
	root       = "/redfish/v1"
	sessions   = root + "/SessionService/Sessions"
	system     = root + "/Systems/1"
	resetPath  = system + "/Actions/ComputerSystem.Reset"
	manager    = root + "/Managers/1"
	mediaColl  = manager + "/VirtualMedia"
	cd         = mediaColl + "/CD"
	insertPath = cd + "/Actions/VirtualMedia.InsertMedia"
	ejectPath  = cd + "/Actions/VirtualMedia.EjectMedia"
	chassis    = root + "/Chassis/1"
	maxBody    = 64 << 10
)

var (
	resetTypes  = []string{"On", "ForceOff", "GracefulShutdown", "ForceRestart", "PowerCycle", "GracefulRestart", "Nmi"}
	bootTargets = []string{"None", "Pxe", "Hdd", "Cd", "BiosSetup", "Usb", "Floppy", "Diags", "UefiShell"}
)

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+root, s.serviceRoot)
	mux.HandleFunc("GET "+root+"/", s.serviceRoot)
	mux.HandleFunc("POST "+sessions, s.login)
	mux.HandleFunc("GET "+sessions+"/{id}", s.auth(s.getSession))
	mux.HandleFunc("DELETE "+sessions+"/{id}", s.auth(s.logout))
	mux.HandleFunc("GET "+root+"/Systems", s.auth(collection("Systems", system)))
	mux.HandleFunc("GET "+system, s.auth(s.getSystem))
	mux.HandleFunc("PATCH "+system, s.auth(s.patchSystem))
	mux.HandleFunc("POST "+resetPath, s.auth(s.reset))
	mux.HandleFunc("GET "+root+"/Managers", s.auth(collection("Managers", manager)))
	mux.HandleFunc("GET "+manager, s.auth(s.getManager))
	mux.HandleFunc("GET "+mediaColl, s.auth(collection("VirtualMedia", cd)))
	mux.HandleFunc("GET "+cd, s.auth(s.getMedia))
	mux.HandleFunc("POST "+insertPath, s.auth(s.insertMedia))
	mux.HandleFunc("POST "+ejectPath, s.auth(s.ejectMedia))
	mux.HandleFunc("GET "+root+"/Chassis", s.auth(collection("Chassis", chassis)))
	mux.HandleFunc("GET "+chassis, s.auth(s.getChassis))
	mux.HandleFunc("/", s.auth(func(w http.ResponseWriter, r *http.Request) {
		redfishError(w, http.StatusNotFound, "Base.1.8.ResourceMissingAtURI", "no resource at this URI")
	}))
	return mux
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("OData-Version", "4.0")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// redfishError writes a Redfish error body (DSP0266 §9.6.3).
func redfishError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, map[string]any{"error": map[string]any{
		"code": code, "message": msg,
		"@Message.ExtendedInfo": []any{map[string]any{"MessageId": code, "Message": msg}},
	}})
}

func link(id string) map[string]string { return map[string]string{"@odata.id": id} }

func collection(name, member string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{
			"@odata.id": r.URL.Path, "Name": name + " Collection",
			"Members": []any{link(member)}, "Members@odata.count": 1,
		})
	}
}

func (s *Server) serviceRoot(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != root && r.URL.Path != root+"/" {
		s.auth(func(w http.ResponseWriter, r *http.Request) {
			redfishError(w, http.StatusNotFound, "Base.1.8.ResourceMissingAtURI", "no resource at this URI")
		})(w, r)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"@odata.id": root, "@odata.type": "#ServiceRoot.v1_5_0.ServiceRoot",
		"Id": "RootService", "Name": "Root Service", "RedfishVersion": "1.8.0",
		"UUID":           "92384634-2938-2342-8820-489239905423",
		"Systems":        link(root + "/Systems"),
		"Chassis":        link(root + "/Chassis"),
		"Managers":       link(root + "/Managers"),
		"SessionService": link(root + "/SessionService"),
		"Links":          map[string]any{"Sessions": link(sessions)},
	})
}

// auth admits a request with a live X-Auth-Token or correct basic auth.
func (s *Server) auth(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ok := false
		if tok := r.Header.Get("X-Auth-Token"); tok != "" {
			s.mu.Lock()
			_, ok = s.sessions[tok]
			s.mu.Unlock()
		} else if u, p, has := r.BasicAuth(); has {
			ok = s.credentialsOK(u, p)
		}
		if !ok {
			w.Header().Set("WWW-Authenticate", `Basic realm="redfishsim"`)
			redfishError(w, http.StatusUnauthorized, "Base.1.8.NoValidSession", "no valid session or credentials")
			return
		}
		h(w, r)
	}
}

func (s *Server) credentialsOK(u, p string) bool {
	uOK := subtle.ConstantTimeCompare([]byte(u), []byte(s.cfg.User)) == 1
	pOK := subtle.ConstantTimeCompare([]byte(p), []byte(s.cfg.Password)) == 1
	return uOK && pOK
}

// readBody decodes a JSON request body into v, refusing unknown fields.
func readBody(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(io.LimitReader(r.Body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		redfishError(w, http.StatusBadRequest, "Base.1.8.MalformedJSON", "malformed or unexpected JSON body")
		return false
	}
	return true
}

func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	var body struct{ UserName, Password string }
	if !readBody(w, r, &body) {
		return
	}
	if !s.credentialsOK(body.UserName, body.Password) {
		redfishError(w, http.StatusUnauthorized, "Base.1.8.ResourceAtURIUnauthorized", "invalid user name or password")
		return
	}
	var b [16]byte
	_, _ = rand.Read(b[:])
	tok := hex.EncodeToString(b[:])
	s.mu.Lock()
	s.nextID++
	id := fmt.Sprint(s.nextID)
	s.sessions[tok] = id
	s.mu.Unlock()
	w.Header().Set("X-Auth-Token", tok)
	w.Header().Set("Location", sessions+"/"+id)
	writeJSON(w, http.StatusCreated, map[string]any{"@odata.id": sessions + "/" + id, "Id": id, "UserName": body.UserName})
}

func (s *Server) getSession(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	writeJSON(w, http.StatusOK, map[string]any{"@odata.id": sessions + "/" + id, "Id": id, "UserName": s.cfg.User})
}

func (s *Server) logout(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	s.mu.Lock()
	defer s.mu.Unlock()
	for tok, sid := range s.sessions {
		if sid == id {
			delete(s.sessions, tok)
			w.WriteHeader(http.StatusNoContent)
			return
		}
	}
	redfishError(w, http.StatusNotFound, "Base.1.8.ResourceMissingAtURI", "no such session")
}

func powerState(on bool) string {
	if on {
		return "On"
	}
	return "Off"
}

func (s *Server) getSystem(w http.ResponseWriter, r *http.Request) {
	st := s.State()
	writeJSON(w, http.StatusOK, map[string]any{
		"@odata.id": system, "@odata.type": "#ComputerSystem.v1_10_0.ComputerSystem",
		"Id": "1", "Name": "System", "SystemType": "Physical",
		"Manufacturer": "Siteboot Test", "Model": "RF-SIM 1", "SerialNumber": "SIM-0001",
		"BiosVersion": "1.2.3", "PowerState": powerState(st.PowerOn),
		"Status": map[string]string{"State": "Enabled", "Health": "OK"},
		"Boot": map[string]any{
			"BootSourceOverrideTarget":                         st.BootTarget,
			"BootSourceOverrideEnabled":                        st.BootEnabled,
			"BootSourceOverrideMode":                           st.BootMode,
			"BootSourceOverrideTarget@Redfish.AllowableValues": bootTargets,
		},
		"Actions": map[string]any{"#ComputerSystem.Reset": map[string]any{
			"target": resetPath, "ResetType@Redfish.AllowableValues": resetTypes[:5],
		}},
		"Links": map[string]any{"Chassis": []any{link(chassis)}, "ManagedBy": []any{link(manager)}},
	})
}

func (s *Server) patchSystem(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Boot *struct {
			BootSourceOverrideTarget  *string
			BootSourceOverrideEnabled *string
			BootSourceOverrideMode    *string
		}
	}
	if !readBody(w, r, &body) {
		return
	}
	if body.Boot == nil {
		redfishError(w, http.StatusBadRequest, "Base.1.8.PropertyMissing", "only Boot can be patched")
		return
	}
	b := body.Boot
	checks := []struct {
		v       *string
		allowed []string
		name    string
	}{
		{b.BootSourceOverrideTarget, bootTargets, "BootSourceOverrideTarget"},
		{b.BootSourceOverrideEnabled, []string{"Disabled", "Once", "Continuous"}, "BootSourceOverrideEnabled"},
		{b.BootSourceOverrideMode, []string{"UEFI", "Legacy"}, "BootSourceOverrideMode"},
	}
	for _, c := range checks {
		if c.v != nil && !slices.Contains(c.allowed, *c.v) {
			redfishError(w, http.StatusBadRequest, "Base.1.8.PropertyValueNotInList", c.name+" has a value not in its list")
			return
		}
	}
	s.mu.Lock()
	if b.BootSourceOverrideTarget != nil {
		s.state.BootTarget = *b.BootSourceOverrideTarget
	}
	if b.BootSourceOverrideEnabled != nil {
		s.state.BootEnabled = *b.BootSourceOverrideEnabled
	}
	if b.BootSourceOverrideMode != nil {
		s.state.BootMode = *b.BootSourceOverrideMode
	}
	s.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) getManager(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{
		"@odata.id": manager, "@odata.type": "#Manager.v1_5_0.Manager",
		"Id": "1", "Name": "Manager", "ManagerType": "BMC", "FirmwareVersion": "4.5.6",
		"Status":       map[string]string{"State": "Enabled", "Health": "OK"},
		"VirtualMedia": link(mediaColl),
	})
}

func (s *Server) getChassis(w http.ResponseWriter, r *http.Request) {
	st := s.State()
	writeJSON(w, http.StatusOK, map[string]any{
		"@odata.id": chassis, "@odata.type": "#Chassis.v1_10_0.Chassis",
		"Id": "1", "Name": "Chassis", "ChassisType": "RackMount",
		"Manufacturer": "Siteboot Test", "Model": "RF-SIM 1", "SerialNumber": "SIM-0001-CH",
		"PowerState": powerState(st.PowerOn),
		"Status":     map[string]string{"State": "Enabled", "Health": "OK"},
	})
}

func (s *Server) getMedia(w http.ResponseWriter, r *http.Request) {
	st := s.State()
	writeJSON(w, http.StatusOK, map[string]any{
		"@odata.id": cd, "@odata.type": "#VirtualMedia.v1_3_0.VirtualMedia",
		"Id": "CD", "Name": "Virtual CD", "MediaTypes": []string{"CD", "DVD"},
		"Inserted": st.MediaInserted, "Image": nullIfEmpty(st.MediaImage), "WriteProtected": true,
		"ConnectedVia": map[bool]string{true: "URI", false: "NotConnected"}[st.MediaInserted],
		"Actions": map[string]any{
			"#VirtualMedia.InsertMedia": map[string]string{"target": insertPath},
			"#VirtualMedia.EjectMedia":  map[string]string{"target": ejectPath},
		},
	})
}

func nullIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func (s *Server) insertMedia(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Image          string
		Inserted       *bool
		WriteProtected *bool
	}
	if !readBody(w, r, &body) {
		return
	}
	if body.Image == "" || !(strings.HasPrefix(body.Image, "http://") || strings.HasPrefix(body.Image, "https://")) {
		redfishError(w, http.StatusBadRequest, "Base.1.8.PropertyValueFormatError", "Image must be an http(s) URI")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state.MediaInserted {
		redfishError(w, http.StatusConflict, "Base.1.8.ResourceInUse", "a medium is inserted already")
		return
	}
	s.state.MediaInserted, s.state.MediaImage = true, body.Image
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) ejectMedia(w http.ResponseWriter, r *http.Request) {
	var body struct{}
	if !readBody(w, r, &body) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.state.MediaInserted {
		redfishError(w, http.StatusConflict, "Base.1.8.ActionNotSupported", "no medium is inserted")
		return
	}
	s.state.MediaInserted, s.state.MediaImage = false, ""
	w.WriteHeader(http.StatusNoContent)
}
