// Sets data-report-ready="yes" on the root element once every plot image has decoded (browser tests read it).
(function(){
  var root=document.documentElement, errors=0;
  window.addEventListener('error', function(){ errors++; root.setAttribute('data-js-errors', String(errors)); });
  window.addEventListener('load', function(){
    var imgs=document.querySelectorAll('img.plot'), loaded=0;
    for (var i=0;i<imgs.length;i++){ if (imgs[i].complete && imgs[i].naturalWidth>0) loaded++; }
    root.setAttribute('data-plots-expected', String(imgs.length));
    root.setAttribute('data-plots-loaded', String(loaded));
    root.setAttribute('data-report-ready', loaded===imgs.length ? 'yes' : 'no');
  });
})();
